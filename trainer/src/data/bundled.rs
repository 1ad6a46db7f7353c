//! The small Fashion-MNIST subset shipped in `data/fashion-mnist-subset/` (6,000 train,
//! 2,000 test, class-balanced). It is found at run time, not compiled in, so the
//! binary stays small and the files stay replaceable.

use std::path::{Path, PathBuf};

use super::idx::{has_fashion_mnist, load_fashion_mnist};
use super::{DataError, DataSplit, Normalization, Result};

const SUBDIR: &str = "fashion-mnist-subset";

/// Where the subset may be, in order of preference.
fn candidates() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(dir) = std::env::var_os("OCTET_DATA_DIR") {
        // Either the subset directory itself or a data directory holding it.
        let dir = PathBuf::from(dir);
        dirs.push(dir.join(SUBDIR));
        dirs.push(dir);
    }
    // target/<profile>/octet → <checkout>/data/fashion-mnist-subset.
    if let Some(exe_dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
    {
        dirs.push(exe_dir.join("../../data").join(SUBDIR));
    }
    dirs.push(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../data")
            .join(SUBDIR),
    );
    dirs
}

/// The first candidate directory that holds the subset.
fn find_dir() -> Result<PathBuf> {
    let dirs = candidates();
    match dirs.iter().find(|d| has_fashion_mnist(d)) {
        Some(dir) => Ok(dir.clone()),
        None => Err(DataError::Missing {
            paths: dirs
                .into_iter()
                .map(|d| d.join("train-images-idx3-ubyte.gz"))
                .collect(),
            hint: "the bundled Fashion-MNIST subset; set OCTET_DATA_DIR to its directory \
                   or regenerate it with data/fashion-mnist-subset/make_subset.py"
                .to_string(),
        }),
    }
}

pub(crate) fn load_bundled() -> Result<DataSplit> {
    let dir = find_dir()?;
    // Tidy `.../target/release/../../data` for the user; fall back to the raw path.
    let dir = dir.canonicalize().unwrap_or(dir);
    let (train, test) = load_fashion_mnist(
        &dir,
        "the bundled subset is incomplete; regenerate it with make_subset.py",
    )?;
    Ok(DataSplit {
        name: "fashion-mnist-subset".to_string(),
        train,
        test,
        norm: Normalization::fashion_mnist(),
        origin: format!("bundled ({})", dir.display()),
    })
}
