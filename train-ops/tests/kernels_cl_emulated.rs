//! The channels-last CUDA kernels executed without a GPU: their source
//! (`kernels/channels_last.cu`, which NVRTC compiles on the GPU) is compiled as host C++ under a small CUDA shim
//! (`tests/emulated/shim.h`: a thread per CUDA thread, a barrier per block) and checked
//! against double-precision references (`tests/emulated/kernels_cl_harness.cpp`). This runs
//! the kernels' indexing, 16-byte bf16 packing, block reductions and partial-result layout
//! where CI runs; timing and the device compiler stay for the GPU tests. Skips, saying so,
//! where no C++20 compiler is found.

use std::path::PathBuf;
use std::process::Command;

fn compiler() -> Option<String> {
    let candidates = [
        std::env::var("CXX").ok(),
        Some("c++".into()),
        Some("g++".into()),
    ];
    candidates.into_iter().flatten().find(|c| {
        Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

#[test]
fn channels_last_kernels_run_emulated_on_the_host() {
    let Some(cxx) = compiler() else {
        println!("skipping: no C++ compiler (set CXX)");
        return;
    };
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("temporary directory");
    // A C++20 standard library with <barrier> is needed; without one the test cannot run.
    let probe = dir.path().join("probe.cpp");
    std::fs::write(
        &probe,
        "#include <barrier>\nint main() { std::barrier<> b(1); b.arrive_and_wait(); }\n",
    )
    .unwrap();
    let ok = Command::new(&cxx)
        .args(["-std=c++20", "-pthread", "-o"])
        .arg(dir.path().join("probe"))
        .arg(&probe)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        println!("skipping: {cxx} cannot build C++20 <barrier> programs");
        return;
    }
    let exe = dir.path().join("harness");
    let emulated = manifest.join("tests/emulated");
    let out = Command::new(&cxx)
        .args(["-std=c++20", "-O2", "-pthread", "-I"])
        .arg(manifest.join("kernels"))
        .arg("-I")
        .arg(&emulated)
        .arg("-include")
        .arg(emulated.join("shim.h"))
        .arg("-x")
        .arg("c++")
        .arg(emulated.join("kernels_cl_harness.cpp"))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("the compiler runs");
    assert!(
        out.status.success(),
        "the kernels do not compile as host C++:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("the harness runs");
    let report = String::from_utf8_lossy(&run.stdout);
    println!("{report}");
    assert!(run.status.success(), "emulated kernels failed:\n{report}");
}
