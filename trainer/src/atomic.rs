//! Crash-safe file writes: a reader sees the old file or the new one, never half of one.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::{Result, TrainError};

/// Writes `bytes` to a temporary file beside `path`, fsyncs it, renames it over `path` and
/// fsyncs the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let io = |error| TrainError::Io {
        path: path.to_path_buf(),
        error,
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&dir).map_err(io)?;
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.tmp", std::process::id())); // `temporary_name`
    let tmp = dir.join(name);
    let result = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        // The rename itself is durable only once the directory is synced.
        if let Ok(d) = File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(io)
}

/// The temporary name [`write_atomic`] gives `path` in process `pid`: `NAME.PID.tmp`.
pub fn temporary_name(name: &str, pid: u32) -> String {
    format!("{name}.{pid}.tmp")
}

/// Removes the temporaries that [`write_atomic`] left in `dir` for the files `names` when its
/// process was killed mid-write (`NAME.PID.tmp`, a whole checkpoint each): only those exact
/// names, and only when process PID is gone or is not an octet (its id reused). Returns what
/// was removed. Other `*.tmp` files are never touched. Where process information is not
/// available (no `/proc`), nothing is removed.
pub fn remove_stale_temporaries(dir: &Path, names: &[&str]) -> Result<Vec<PathBuf>> {
    let io = |error| TrainError::Io {
        path: dir.to_path_buf(),
        error,
    };
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return Ok(Vec::new());
    }
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(e)),
    };
    let mut removed = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io)?;
        let file = entry.file_name();
        let Some(file) = file.to_str() else { continue };
        let pid = names.iter().find_map(|n| {
            let digits = file
                .strip_prefix(n)?
                .strip_prefix('.')?
                .strip_suffix(".tmp")?;
            let ok = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
            ok.then(|| digits.parse::<u32>().ok()).flatten()
        });
        let Some(pid) = pid else { continue };
        if pid == std::process::id() {
            continue;
        }
        let comm = fs::read_to_string(proc.join(pid.to_string()).join("comm")).ok();
        if comm.is_some_and(|c| c.trim_end().starts_with("octet")) {
            continue; // an octet still running (writing into the same directory)
        }
        let path = entry.path();
        if entry.file_type().map_err(io)?.is_file() {
            fs::remove_file(&path).map_err(|error| TrainError::Io {
                path: path.clone(),
                error,
            })?;
            removed.push(path);
        }
    }
    removed.sort();
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_content_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub").join("f.bin");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::read_dir(p.parent().unwrap()).unwrap().count(), 1);
    }

    /// Issue 19: a kill during a checkpoint write left `last.safetensors.PID.tmp` behind
    /// forever; the next run removes it, and nothing else.
    #[test]
    fn stale_temporaries_of_our_files_only_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let ours = temporary_name("last.safetensors", 999_999_999);
        let keep = [
            "notes.tmp".to_string(),
            "metrics.csv.12ab.tmp".into(),
            "other.bin.999999999.tmp".into(),
            temporary_name("metrics.csv", std::process::id()),
            "last.safetensors".into(),
        ];
        for f in keep.iter().chain([&ours]) {
            fs::write(d.join(f), b"x").unwrap();
        }
        let removed = remove_stale_temporaries(d, &["last.safetensors", "metrics.csv"]).unwrap();
        if Path::new("/proc/self").exists() {
            assert_eq!(removed, vec![d.join(&ours)]);
        }
        for f in &keep {
            assert!(d.join(f).exists(), "{f} was removed");
        }
        assert!(remove_stale_temporaries(&d.join("absent"), &["x"])
            .unwrap()
            .is_empty());
    }
}
