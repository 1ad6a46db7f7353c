//! `include/octet.h` must be what cbindgen generates from `src/lib.rs` today.
//!
//! `OCTET_BLESS=1 cargo test --release --test header` rewrites it.

use std::path::Path;

#[test]
fn committed_header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen could not read src/lib.rs")
        .write(&mut generated);
    let path = dir.join("include/octet.h");
    if std::env::var_os("OCTET_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write include/octet.h");
        return;
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "capi/include/octet.h is not what cbindgen generates from capi/src/lib.rs: run \
         `OCTET_BLESS=1 cargo test --release --manifest-path capi/Cargo.toml --test header` \
         and commit the header"
    );
}
