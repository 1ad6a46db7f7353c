//! Fashion-MNIST in the IDX format (optionally gzip-compressed): big-endian magic and
//! dimensions followed by raw `u8` data. Images are 28×28 and are zero-padded to
//! 32×32 so that every model sees the same input size as CIFAR-10.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::{DataError, Dataset, Result};

const IMAGES_MAGIC: u32 = 0x0000_0803;
const LABELS_MAGIC: u32 = 0x0000_0801;
const SIDE: usize = 28;
const PADDED: usize = 32;
const PAD: usize = (PADDED - SIDE) / 2;
const CLASSES: usize = 10;

/// `DIR/NAME.gz`, or the uncompressed `DIR/NAME`, whichever exists first.
fn find(dir: &Path, name: &str) -> Option<PathBuf> {
    [dir.join(format!("{name}.gz")), dir.join(name)]
        .into_iter()
        .find(|p| p.is_file())
}

/// Whether `dir` looks like a Fashion-MNIST directory (its training images exist).
pub(crate) fn has_fashion_mnist(dir: &Path) -> bool {
    find(dir, "train-images-idx3-ubyte").is_some()
}

/// Loads the train (`train-*`) and test (`t10k-*`) splits from `dir`, 1×32×32, 10
/// classes. `hint` tells the user how to get missing files.
pub(crate) fn load_fashion_mnist(dir: &Path, hint: &str) -> Result<(Dataset, Dataset)> {
    let names = [
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ];
    // Report every missing file at once rather than one per run.
    let mut found = Vec::with_capacity(names.len());
    let mut missing = Vec::new();
    for name in names {
        match find(dir, name) {
            Some(p) => found.push(p),
            None => missing.push(dir.join(format!("{name}.gz"))),
        }
    }
    if let [train_images, train_labels, test_images, test_labels] = found.as_slice() {
        Ok((
            load_split(train_images, train_labels)?,
            load_split(test_images, test_labels)?,
        ))
    } else {
        Err(DataError::Missing {
            paths: missing,
            hint: format!("or the same names without .gz; {hint}"),
        })
    }
}

fn load_split(images_path: &Path, labels_path: &Path) -> Result<Dataset> {
    let (count, pixels) = read_images(images_path)?;
    let labels = read_labels(labels_path)?;
    if count != labels.len() {
        return Err(DataError::CountMismatch {
            images_path: images_path.to_path_buf(),
            images: count,
            labels_path: labels_path.to_path_buf(),
            labels: labels.len(),
        });
    }
    if let Some((index, &label)) = labels
        .iter()
        .enumerate()
        .find(|(_, &l)| usize::from(l) >= CLASSES)
    {
        return Err(DataError::LabelOutOfRange {
            path: labels_path.to_path_buf(),
            index,
            label,
            classes: CLASSES,
        });
    }
    Dataset::new(pad(&pixels, count), labels, 1, PADDED, PADDED, CLASSES)
}

/// Centres each 28×28 image in a zeroed 32×32 one.
fn pad(pixels: &[u8], count: usize) -> Vec<u8> {
    let mut out = vec![0u8; count * PADDED * PADDED];
    for (src, dst) in pixels
        .chunks_exact(SIDE * SIDE)
        .zip(out.chunks_exact_mut(PADDED * PADDED))
    {
        for (src_row, dst_row) in src
            .chunks_exact(SIDE)
            .zip(dst.chunks_exact_mut(PADDED).skip(PAD))
        {
            dst_row[PAD..PAD + SIDE].copy_from_slice(src_row);
        }
    }
    out
}

/// Returns the image count and the 28×28 pixels.
fn read_images(path: &Path) -> Result<(usize, Vec<u8>)> {
    let data = read_maybe_gzip(path)?;
    let header = parse_header(path, &data, IMAGES_MAGIC, 3)?;
    let (count, rows, cols) = (header[0], header[1], header[2]);
    if (rows, cols) != (SIDE, SIDE) {
        return Err(DataError::BadShape {
            path: path.to_path_buf(),
            expected: format!("{SIDE}×{SIDE}"),
            found: format!("{rows}×{cols}"),
        });
    }
    let body = check_size(path, &data, 16, count, SIDE * SIDE)?;
    Ok((count, body.to_vec()))
}

fn read_labels(path: &Path) -> Result<Vec<u8>> {
    let data = read_maybe_gzip(path)?;
    let header = parse_header(path, &data, LABELS_MAGIC, 1)?;
    Ok(check_size(path, &data, 8, header[0], 1)?.to_vec())
}

/// Checks the magic and returns the `dims` big-endian dimensions after it.
fn parse_header(path: &Path, data: &[u8], magic: u32, dims: usize) -> Result<Vec<usize>> {
    let header_len = 4 * (dims + 1);
    let word = |i: usize| -> Option<u32> {
        let bytes = data.get(4 * i..4 * i + 4)?;
        Some(u32::from_be_bytes(bytes.try_into().ok()?))
    };
    let truncated = || DataError::Truncated {
        path: path.to_path_buf(),
        expected: header_len as u64,
        actual: data.len() as u64,
    };
    let found = word(0).ok_or_else(truncated)?;
    if found != magic {
        return Err(DataError::BadMagic {
            path: path.to_path_buf(),
            expected: magic,
            found,
        });
    }
    (1..=dims)
        .map(|i| {
            let d = word(i).ok_or_else(truncated)?;
            usize::try_from(d).map_err(|_| {
                DataError::Invalid(format!("{}: dimension {d} too large", path.display()))
            })
        })
        .collect()
}

/// Checks that `data` is exactly `header + count·item` bytes and returns the body.
fn check_size<'a>(
    path: &Path,
    data: &'a [u8],
    header: usize,
    count: usize,
    item: usize,
) -> Result<&'a [u8]> {
    // u128 cannot overflow for 32-bit dimensions.
    let expected = header as u128 + count as u128 * item as u128;
    let actual = data.len() as u128;
    let clamp = |n: u128| u64::try_from(n).unwrap_or(u64::MAX);
    if actual < expected {
        return Err(DataError::Truncated {
            path: path.to_path_buf(),
            expected: clamp(expected),
            actual: clamp(actual),
        });
    }
    if actual > expected {
        return Err(DataError::TrailingData {
            path: path.to_path_buf(),
            expected: clamp(expected),
            actual: clamp(actual),
        });
    }
    Ok(data.get(header..).unwrap_or_default())
}

/// Reads a file, decompressing it if it starts with the gzip magic (so a
/// compressed file without `.gz` in its name works too). Every byte must belong to a gzip
/// member: bytes after the last one (a damaged or appended-to download) are an error, not
/// silently ignored.
pub(crate) fn read_maybe_gzip(path: &Path) -> Result<Vec<u8>> {
    read_capped(path, MAX_DECOMPRESSED)
}

/// [`read_maybe_gzip`] accepting at most `max` decompressed bytes.
fn read_capped(path: &Path, max: usize) -> Result<Vec<u8>> {
    let io = |error| DataError::Io {
        path: path.to_path_buf(),
        error,
    };
    let raw = std::fs::read(path).map_err(io)?;
    if !raw.starts_with(&GZIP_MAGIC) {
        return Ok(raw);
    }
    // The gzip trailer holds the uncompressed size mod 2^32: a capacity hint only,
    // capped so that a corrupt trailer cannot request a huge allocation.
    let hint = raw
        .get(raw.len().saturating_sub(4)..)
        .and_then(|b| b.try_into().ok())
        .map_or(0, |b| u32::from_le_bytes(b) as usize)
        .min(256 << 20);
    let mut out = Vec::with_capacity(hint);
    let mut rest = raw.as_slice();
    // One member after another (concatenated gzip files are one valid gzip file).
    while !rest.is_empty() {
        if !rest.starts_with(&GZIP_MAGIC) {
            return Err(DataError::Invalid(format!(
                "{}: {} byte(s) of trailing data after the end of the gzip stream (a damaged \
                 or appended-to file?): download or decompress it again",
                path.display(),
                rest.len()
            )));
        }
        let room = (max - out.len()) as u64 + 1;
        let mut member = flate2::bufread::GzDecoder::new(rest).take(room);
        member.read_to_end(&mut out).map_err(io)?;
        if out.len() > max {
            return Err(DataError::Invalid(format!(
                "{}: decompresses to more than {max} bytes, far more than a Fashion-MNIST file \
                 (47 MB): not an IDX file of 28×28 images",
                path.display(),
            )));
        }
        rest = member.into_inner().into_inner();
    }
    Ok(out)
}

/// Decompressed bytes accepted from one IDX file (a gzip bomb is an error, not an abort).
const MAX_DECOMPRESSED: usize = 1 << 30;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

#[cfg(test)]
mod tests {
    use super::*;

    fn header(magic: u32, dims: &[u32]) -> Vec<u8> {
        let mut v = magic.to_be_bytes().to_vec();
        for d in dims {
            v.extend_from_slice(&d.to_be_bytes());
        }
        v
    }

    #[test]
    fn pad_centres_image() {
        let src: Vec<u8> = (0..(SIDE * SIDE)).map(|i| (i % 251) as u8 + 1).collect();
        let out = pad(&src, 1);
        assert_eq!(out.len(), PADDED * PADDED);
        for y in 0..PADDED {
            for x in 0..PADDED {
                let v = out[y * PADDED + x];
                if (PAD..PAD + SIDE).contains(&y) && (PAD..PAD + SIDE).contains(&x) {
                    assert_eq!(v, src[(y - PAD) * SIDE + (x - PAD)]);
                } else {
                    assert_eq!(v, 0);
                }
            }
        }
    }

    /// A size error as (kind, expected bytes, actual bytes); panics on any other result.
    fn size_error<T: std::fmt::Debug>(r: Result<T>) -> (&'static str, u64, u64) {
        match r {
            Err(DataError::Truncated {
                expected, actual, ..
            }) => ("truncated", expected, actual),
            Err(DataError::TrailingData {
                expected, actual, ..
            }) => ("trailing", expected, actual),
            other => panic!("expected a size error, got {other:?}"),
        }
    }

    #[test]
    fn header_errors() {
        let p = Path::new("f");
        let ok = header(LABELS_MAGIC, &[2]);
        assert_eq!(parse_header(p, &ok, LABELS_MAGIC, 1).unwrap(), vec![2]);
        assert!(matches!(
            parse_header(p, &ok, IMAGES_MAGIC, 3),
            Err(DataError::BadMagic {
                expected: IMAGES_MAGIC,
                found: LABELS_MAGIC,
                ..
            })
        ));
        assert_eq!(
            size_error(parse_header(p, &ok[..6], LABELS_MAGIC, 1)),
            ("truncated", 8, 6)
        );
        assert!(matches!(
            parse_header(p, &[], LABELS_MAGIC, 1),
            Err(DataError::Truncated { .. })
        ));
    }

    #[test]
    fn size_errors() {
        let p = Path::new("f");
        let mut data = header(LABELS_MAGIC, &[3]);
        data.extend_from_slice(&[1, 2]);
        assert_eq!(
            size_error(check_size(p, &data, 8, 3, 1)),
            ("truncated", 11, 10)
        );
        data.extend_from_slice(&[3, 4]);
        assert_eq!(
            size_error(check_size(p, &data, 8, 3, 1)),
            ("trailing", 11, 12)
        );
        data.pop();
        assert_eq!(check_size(p, &data, 8, 3, 1).unwrap(), &[1, 2, 3]);
        // Huge claimed sizes must not overflow.
        assert!(check_size(p, &data, 16, usize::MAX, 784).is_err());
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    /// Issue 19: a gzip file with trailing garbage was read as if the garbage were not there;
    /// its error, like every OS and gzip error, must print its text once.
    #[test]
    fn gzip_trailing_data_is_an_error_and_members_concatenate() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.gz");
        let mut f = gzip(b"hello ");
        std::fs::write(&p, &f).unwrap();
        assert_eq!(read_maybe_gzip(&p).unwrap(), b"hello ");
        f.extend_from_slice(&gzip(b"world"));
        std::fs::write(&p, &f).unwrap();
        assert_eq!(read_maybe_gzip(&p).unwrap(), b"hello world");
        f.extend_from_slice(b"garbage");
        std::fs::write(&p, &f).unwrap();
        let e = read_maybe_gzip(&p).unwrap_err().to_string();
        assert!(e.contains("7 byte(s) of trailing data"), "{e}");
        // Truncated, and corrupt: a gzip error, named once with its file.
        let g = gzip(&[7u8; 1000]);
        std::fs::write(&p, &g[..g.len() - 10]).unwrap();
        let e = anyhow::Error::from(read_maybe_gzip(&p).unwrap_err());
        let text = format!("{e:#}");
        assert!(text.starts_with(&p.display().to_string()), "{text}");
        let mut c = g.clone();
        c[12] ^= 0xff;
        c[13] ^= 0xff;
        std::fs::write(&p, &c).unwrap();
        let e = anyhow::Error::from(read_maybe_gzip(&p).unwrap_err());
        let (text, plain) = (format!("{e:#}"), e.to_string());
        assert_eq!(text, plain, "the cause is printed twice");
        // A gzip bomb stops at the bound.
        std::fs::write(&p, gzip(&[0u8; 5000])).unwrap();
        let e = read_capped(&p, 4999).unwrap_err().to_string();
        assert!(e.contains("more than 4999 bytes"), "{e}");
        assert_eq!(read_capped(&p, 5000).unwrap().len(), 5000);
    }
}
