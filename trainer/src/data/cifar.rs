//! CIFAR-10, binary version: records of one label byte followed by 3072 pixel bytes
//! (1024 red, 1024 green, 1024 blue, each row-major 32×32), which is already the
//! planar CHW layout of [`Dataset`].

use std::path::{Path, PathBuf};

use super::{DataError, Dataset, Result};

const SIDE: usize = 32;
const CHANNELS: usize = 3;
const IMAGE: usize = CHANNELS * SIDE * SIDE;
const RECORD: usize = 1 + IMAGE;
const OFFICIAL_RECORDS: usize = 10_000;
const CLASSES: usize = 10;
const TRAIN_FILES: [&str; 5] = [
    "data_batch_1.bin",
    "data_batch_2.bin",
    "data_batch_3.bin",
    "data_batch_4.bin",
    "data_batch_5.bin",
];
const TEST_FILE: &str = "test_batch.bin";
const HINT: &str = "download the binary version (cifar-10-binary.tar.gz) from \
     https://www.cs.toronto.edu/~kriz/cifar.html, unpack it and pass its directory";

/// `dir` itself if it holds the batches, else its `cifar-10-batches-bin/` child (the
/// directory the official archive unpacks to).
fn batches_dir(dir: &Path) -> PathBuf {
    let child = dir.join("cifar-10-batches-bin");
    if !dir.join(TRAIN_FILES[0]).is_file() && child.is_dir() {
        child
    } else {
        dir.to_path_buf()
    }
}

/// Loads the five training batches and the test batch. Returns the directory the
/// files were read from with the (train, test) pair.
pub(crate) fn load_cifar10(dir: &Path) -> Result<(PathBuf, Dataset, Dataset)> {
    let dir = batches_dir(dir);
    let missing: Vec<PathBuf> = TRAIN_FILES
        .iter()
        .chain([&TEST_FILE])
        .map(|name| dir.join(name))
        .filter(|p| !p.is_file())
        .collect();
    if !missing.is_empty() {
        return Err(DataError::Missing {
            paths: missing,
            hint: HINT.to_string(),
        });
    }
    let train_paths: Vec<PathBuf> = TRAIN_FILES.iter().map(|n| dir.join(n)).collect();
    let train = read_batches(&train_paths)?;
    let test = read_batches(&[dir.join(TEST_FILE)])?;
    Ok((dir, train, test))
}

fn read_batches(paths: &[PathBuf]) -> Result<Dataset> {
    let mut images = Vec::new();
    let mut labels = Vec::new();
    for path in paths {
        let data = std::fs::read(path).map_err(|error| DataError::Io {
            path: path.clone(),
            error,
        })?;
        if data.is_empty() || data.len() % RECORD != 0 {
            return Err(DataError::BadRecordSize {
                path: path.clone(),
                size: data.len() as u64,
                record: RECORD as u64,
                official: (RECORD * OFFICIAL_RECORDS) as u64,
            });
        }
        let n = data.len() / RECORD;
        images.reserve(n * IMAGE);
        labels.reserve(n);
        for (index, record) in data.chunks_exact(RECORD).enumerate() {
            let (&label, pixels) = record
                .split_first()
                .ok_or_else(|| DataError::Invalid("empty CIFAR record".to_string()))?;
            if usize::from(label) >= CLASSES {
                return Err(DataError::LabelOutOfRange {
                    path: path.clone(),
                    index,
                    label,
                    classes: CLASSES,
                });
            }
            labels.push(label);
            images.extend_from_slice(pixels);
        }
    }
    Dataset::new(images, labels, CHANNELS, SIDE, SIDE, CLASSES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_size_matches_official_file_size() {
        assert_eq!(RECORD, 3073);
        assert_eq!(RECORD * OFFICIAL_RECORDS, 30_730_000);
    }

    #[test]
    fn prefers_dir_then_child() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(batches_dir(tmp.path()), tmp.path());
        let child = tmp.path().join("cifar-10-batches-bin");
        std::fs::create_dir(&child).unwrap();
        assert_eq!(batches_dir(tmp.path()), child);
        std::fs::write(tmp.path().join(TRAIN_FILES[0]), [0u8; RECORD]).unwrap();
        assert_eq!(batches_dir(tmp.path()), tmp.path());
    }
}
