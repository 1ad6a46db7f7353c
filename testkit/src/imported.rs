//! The imported models the tests compare against their expected bytes: `bench/imported_models.sh
//! DIR` writes NAME.o8, NAME.inputs and NAME.expected into DIR, and the tests read DIR from
//! OCTET_IMPORTED_DIR.

use std::path::PathBuf;

/// One imported model with its inputs and the output bytes the host gave for them.
pub struct ImportedCase {
    /// DIR/NAME.o8.
    pub path: PathBuf,
    /// The `.o8` bytes.
    pub model: Vec<u8>,
    /// The inputs, one after another.
    pub inputs: Vec<u8>,
    /// The expected output bytes, one output after another.
    pub expected: Vec<u8>,
}

/// Every case in OCTET_IMPORTED_DIR, or `None` (after printing a SKIP line) when it is unset;
/// panics when the folder holds no `.o8`, so a wrong path fails rather than passes.
pub fn imported_cases() -> Option<Vec<ImportedCase>> {
    let Some(dir) = std::env::var_os("OCTET_IMPORTED_DIR") else {
        println!("SKIP imported models: set OCTET_IMPORTED_DIR (bench/imported_models.sh DIR)");
        return None;
    };
    let dir = PathBuf::from(dir);
    let mut cases = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "o8") {
            continue;
        }
        let read = |ext: &str| std::fs::read(path.with_extension(ext)).unwrap();
        let (model, inputs, expected) = (read("o8"), read("inputs"), read("expected"));
        cases.push(ImportedCase {
            path,
            model,
            inputs,
            expected,
        });
    }
    assert!(!cases.is_empty(), "no .o8 in {}", dir.display());
    Some(cases)
}
