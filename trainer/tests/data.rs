//! Integration tests of the data pipeline: real and bundled Fashion-MNIST, CIFAR-10 from
//! generated files in the official layout, error messages for bad inputs, source
//! strings, and loader reproducibility.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use flate2::write::GzEncoder;
use flate2::Compression;
use octet_trainer::data::{
    load, synthetic, Augment, Batch, DataError, DataSource, Loader, LoaderConfig, Normalization,
    Sampler, FASHION_MNIST_SYSTEM_DIR,
};

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::new(), Compression::fast());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

fn idx_images(n_header: u32, pixels: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    for word in [0x0803, n_header, 28, 28] {
        v.extend_from_slice(&u32::to_be_bytes(word));
    }
    v.extend_from_slice(pixels);
    v
}

fn idx_labels(labels: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    for word in [0x0801, labels.len() as u32] {
        v.extend_from_slice(&u32::to_be_bytes(word));
    }
    v.extend_from_slice(labels);
    v
}

/// Pixel (y, x) of synthetic Fashion-MNIST image i: never zero.
fn fm_pixel(i: usize, y: usize, x: usize) -> u8 {
    ((i * 31 + y * 28 + x) % 255) as u8 + 1
}

/// Writes a small valid Fashion-MNIST directory: `n` images per split, label i % 10.
fn write_fashion(dir: &Path, n: usize, compressed: bool) {
    for split in ["train", "t10k"] {
        let pixels: Vec<u8> = (0..n)
            .flat_map(|i| (0..28 * 28).map(move |p| fm_pixel(i, p / 28, p % 28)))
            .collect();
        let labels: Vec<u8> = (0..n).map(|i| (i % 10) as u8).collect();
        let files = [
            (
                format!("{split}-images-idx3-ubyte"),
                idx_images(n as u32, &pixels),
            ),
            (format!("{split}-labels-idx1-ubyte"), idx_labels(&labels)),
        ];
        for (name, bytes) in files {
            if compressed {
                std::fs::write(dir.join(format!("{name}.gz")), gzip(&bytes)).unwrap();
            } else {
                std::fs::write(dir.join(name), bytes).unwrap();
            }
        }
    }
}

fn fashion_err(dir: &Path) -> String {
    let err = load(&DataSource::FashionMnist(Some(dir.to_path_buf()))).unwrap_err();
    err.to_string()
}

#[test]
fn real_fashion_mnist() {
    let dir = Path::new(FASHION_MNIST_SYSTEM_DIR);
    if !dir.join("train-images-idx3-ubyte.gz").exists() {
        println!(
            "skipped: {FASHION_MNIST_SYSTEM_DIR} is absent (apt-get install dataset-fashion-mnist)"
        );
        return;
    }
    let split = load(&DataSource::FashionMnist(None)).unwrap();
    assert_eq!(split.name, "fashion-mnist");
    assert_eq!(split.origin, FASHION_MNIST_SYSTEM_DIR);
    assert_eq!(split.norm, Normalization::fashion_mnist());
    for (ds, n) in [(&split.train, 60_000), (&split.test, 10_000)] {
        assert_eq!(ds.len(), n);
        assert_eq!(
            (ds.channels, ds.height, ds.width, ds.classes),
            (1, 32, 32, 10)
        );
        assert_eq!(ds.images.len(), n * 1024);
        assert_eq!(ds.class_counts(), vec![n / 10; 10]);
        for img in ds.images.chunks_exact(1024) {
            for (y, row) in img.chunks_exact(32).enumerate() {
                if !(2..30).contains(&y) {
                    assert!(row.iter().all(|&p| p == 0), "padding row {y}");
                } else {
                    assert_eq!(&row[..2], &[0, 0]);
                    assert_eq!(&row[30..], &[0, 0]);
                }
            }
        }
    }
    // The interior is the original 28×28 image.
    let raw = std::fs::read(dir.join("t10k-images-idx3-ubyte.gz")).unwrap();
    let mut raw_pixels = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&raw[..]), &mut raw_pixels)
        .unwrap();
    let last = split.test.image(9_999);
    for y in 0..28 {
        let original = &raw_pixels[16 + 9_999 * 784 + y * 28..][..28];
        assert_eq!(&last[(y + 2) * 32 + 2..][..28], original);
    }
    // `auto` prefers the full set when it is installed.
    let auto = load(&DataSource::Auto).unwrap();
    assert_eq!(auto.name, "fashion-mnist");
    assert_eq!(auto.train.len(), 60_000);
}

#[test]
fn bundled_subset() {
    let split = load(&DataSource::Bundled).unwrap();
    assert_eq!(split.name, "fashion-mnist-subset");
    assert!(split.origin.starts_with("bundled"), "{}", split.origin);
    assert_eq!(split.norm, Normalization::fashion_mnist());
    assert_eq!(split.train.len(), 6_000);
    assert_eq!(split.test.len(), 2_000);
    assert_eq!(split.train.class_counts(), vec![600; 10]);
    assert_eq!(split.test.class_counts(), vec![200; 10]);
    assert_eq!(
        (split.train.channels, split.train.height, split.train.width),
        (1, 32, 32)
    );
    // The subset is the first 600 (200) of each class of the full set, in file order.
    if Path::new(FASHION_MNIST_SYSTEM_DIR).is_dir() {
        let full = load(&DataSource::FashionMnist(None)).unwrap();
        for (sub, full, per_class) in [
            (&split.train, &full.train, 600),
            (&split.test, &full.test, 200),
        ] {
            let mut taken = [0usize; 10];
            let picked: Vec<usize> = (0..full.len())
                .filter(|&i| {
                    let c = usize::from(full.label(i));
                    taken[c] += 1;
                    taken[c] <= per_class
                })
                .collect();
            assert!(
                full.subset(&picked) == *sub,
                "subset differs from the full set"
            );
        }
    }
    let total: u64 = ["train-images", "train-labels", "t10k-images", "t10k-labels"]
        .iter()
        .map(|stem| {
            let kind = if stem.ends_with("images") {
                "idx3"
            } else {
                "idx1"
            };
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
                "../data/fashion-mnist-subset/{stem}-{kind}-ubyte.gz"
            ));
            std::fs::metadata(path).unwrap().len()
        })
        .sum();
    assert!(total <= 4 << 20, "bundled subset is {total} bytes");
}

#[test]
fn small_fashion_dir_compressed_and_raw() {
    for compressed in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        write_fashion(tmp.path(), 12, compressed);
        let split = load(&DataSource::FashionMnist(Some(tmp.path().into()))).unwrap();
        assert_eq!(split.origin, tmp.path().display().to_string());
        assert_eq!((split.train.len(), split.test.len()), (12, 12));
        assert_eq!(split.train.labels[11], 1);
        let img = split.train.image(5);
        assert_eq!(img[2 * 32 + 2], fm_pixel(5, 0, 0));
        assert_eq!(img[29 * 32 + 29], fm_pixel(5, 27, 27));
        assert_eq!(img[31 * 32 + 31], 0);
    }
}

/// Pixel (c, y, x) of record k of CIFAR file f.
fn cifar_pixel(f: usize, k: usize, c: usize, y: usize, x: usize) -> u8 {
    ((f * 41 + k * 13 + c * 100 + y * 3 + x * 7) % 256) as u8
}

fn cifar_label(f: usize, k: usize) -> u8 {
    ((f * 3 + k) % 10) as u8
}

const CIFAR_FILES: [&str; 6] = [
    "data_batch_1.bin",
    "data_batch_2.bin",
    "data_batch_3.bin",
    "data_batch_4.bin",
    "data_batch_5.bin",
    "test_batch.bin",
];

/// Writes the six batches with `records` records each, in the official layout.
fn write_cifar(dir: &Path, records: usize) {
    std::fs::create_dir_all(dir).unwrap();
    for (f, name) in CIFAR_FILES.iter().enumerate() {
        let mut bytes = Vec::with_capacity(records * 3073);
        for k in 0..records {
            bytes.push(cifar_label(f, k));
            for c in 0..3 {
                for y in 0..32 {
                    for x in 0..32 {
                        bytes.push(cifar_pixel(f, k, c, y, x));
                    }
                }
            }
        }
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

#[test]
fn cifar10_from_generated_files() {
    let tmp = tempfile::tempdir().unwrap();
    // The parent of `cifar-10-batches-bin/` works as well as the directory itself.
    let batches = tmp.path().join("cifar-10-batches-bin");
    write_cifar(&batches, 20);
    for dir in [tmp.path(), batches.as_path()] {
        let split = load(&DataSource::Cifar10(dir.into())).unwrap();
        assert_eq!(split.name, "cifar10");
        assert_eq!(split.origin, batches.display().to_string());
        assert_eq!(split.norm, Normalization::cifar10());
        assert_eq!((split.train.len(), split.test.len()), (100, 20));
        let ds = &split.train;
        assert_eq!(
            (ds.channels, ds.height, ds.width, ds.classes),
            (3, 32, 32, 10)
        );
        for (i, img) in ds.images.chunks_exact(3072).enumerate() {
            let (f, k) = (i / 20, i % 20);
            assert_eq!(ds.label(i), cifar_label(f, k));
            for &(c, y, x) in &[(0, 0, 0), (1, 5, 31), (2, 31, 0), (2, 17, 9)] {
                assert_eq!(img[c * 1024 + y * 32 + x], cifar_pixel(f, k, c, y, x));
            }
        }
        assert_eq!(split.test.image(19)[2048 + 33], cifar_pixel(5, 19, 2, 1, 1));
        assert_eq!(split.test.label(7), cifar_label(5, 7));
    }
}

#[test]
fn missing_files_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let msg = fashion_err(tmp.path());
    let expected = tmp.path().join("train-images-idx3-ubyte.gz");
    assert!(msg.contains(&expected.display().to_string()), "{msg}");
    assert!(msg.contains("t10k-labels-idx1-ubyte.gz"), "{msg}");
    assert!(
        msg.contains("apt-get install dataset-fashion-mnist"),
        "{msg}"
    );
    assert!(msg.contains("--data DIR"), "{msg}");

    write_cifar(tmp.path(), 1);
    std::fs::remove_file(tmp.path().join("test_batch.bin")).unwrap();
    std::fs::remove_file(tmp.path().join("data_batch_3.bin")).unwrap();
    let msg = load(&DataSource::Cifar10(tmp.path().into()))
        .unwrap_err()
        .to_string();
    for name in ["test_batch.bin", "data_batch_3.bin"] {
        let path = tmp.path().join(name).display().to_string();
        assert!(msg.contains(&path), "{msg}");
    }
    assert!(!msg.contains("data_batch_1.bin"), "{msg}");
}

#[test]
fn truncated_idx_names_file_and_size() {
    let tmp = tempfile::tempdir().unwrap();
    write_fashion(tmp.path(), 3, true);
    // The header claims 3 images but only 2 follow.
    let path = tmp.path().join("train-images-idx3-ubyte.gz");
    std::fs::write(&path, gzip(&idx_images(3, &[7; 2 * 784]))).unwrap();
    let msg = fashion_err(tmp.path());
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("truncated"), "{msg}");
    assert!(msg.contains(&(16 + 3 * 784).to_string()), "{msg}");
    assert!(msg.contains(&(16 + 2 * 784).to_string()), "{msg}");

    // A gzip stream cut short is an error naming the file too.
    let full = gzip(&idx_images(3, &[7; 3 * 784]));
    std::fs::write(&path, &full[..full.len() / 2]).unwrap();
    let msg = fashion_err(tmp.path());
    assert!(msg.contains(&path.display().to_string()), "{msg}");
}

#[test]
fn wrong_idx_magic() {
    let tmp = tempfile::tempdir().unwrap();
    write_fashion(tmp.path(), 3, true);
    // Labels where the images should be.
    let path = tmp.path().join("t10k-images-idx3-ubyte.gz");
    std::fs::write(&path, gzip(&idx_labels(&[1, 2, 3]))).unwrap();
    let err = load(&DataSource::FashionMnist(Some(tmp.path().into()))).unwrap_err();
    assert!(
        matches!(
            err,
            DataError::BadMagic {
                expected: 0x803,
                found: 0x801,
                ..
            }
        ),
        "{err}"
    );
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(
        msg.contains("0x00000803") && msg.contains("0x00000801"),
        "{msg}"
    );
}

#[test]
fn idx_count_mismatch_and_bad_label() {
    let tmp = tempfile::tempdir().unwrap();
    write_fashion(tmp.path(), 3, true);
    let labels = tmp.path().join("train-labels-idx1-ubyte.gz");
    std::fs::write(&labels, gzip(&idx_labels(&[1, 2]))).unwrap();
    let msg = fashion_err(tmp.path());
    assert!(
        msg.contains("3 images") && msg.contains("2 labels"),
        "{msg}"
    );
    assert!(msg.contains(&labels.display().to_string()), "{msg}");

    std::fs::write(&labels, gzip(&idx_labels(&[1, 10, 2]))).unwrap();
    let msg = fashion_err(tmp.path());
    assert!(msg.contains(&labels.display().to_string()), "{msg}");
    assert!(msg.contains("label 10"), "{msg}");
}

#[test]
fn bad_cifar_files() {
    let tmp = tempfile::tempdir().unwrap();
    write_cifar(tmp.path(), 2);
    let path = tmp.path().join("data_batch_2.bin");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 5]).unwrap();
    let msg = load(&DataSource::Cifar10(tmp.path().into()))
        .unwrap_err()
        .to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    for needle in ["6141", "3073", "30730000"] {
        assert!(msg.contains(needle), "{needle}: {msg}");
    }

    std::fs::write(&path, []).unwrap();
    let msg = load(&DataSource::Cifar10(tmp.path().into()))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("size 0 bytes"), "{msg}");

    let mut bad_label = bytes;
    bad_label[3073] = 10;
    std::fs::write(&path, bad_label).unwrap();
    let err = load(&DataSource::Cifar10(tmp.path().into())).unwrap_err();
    assert!(
        matches!(
            err,
            DataError::LabelOutOfRange {
                index: 1,
                label: 10,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains(&path.display().to_string()));
}

#[test]
fn source_strings_round_trip() {
    let forms = [
        "auto",
        "bundled",
        "fashion-mnist",
        "fashion-mnist:/data/fm",
        "cifar10:/data/cifar-10-batches-bin",
        "cifar10:relative/dir:with:colons",
        "synthetic",
        "synthetic:1000",
        "synthetic:1000:200",
        "synthetic:1000:200:7",
    ];
    for form in forms {
        let source: DataSource = form.parse().unwrap();
        let shown = source.to_string();
        assert_eq!(
            shown.parse::<DataSource>().unwrap(),
            source,
            "{form} → {shown}"
        );
    }
    assert_eq!(
        "synthetic".parse::<DataSource>().unwrap(),
        DataSource::Synthetic {
            train: 50_000,
            test: 10_000,
            seed: 0
        }
    );
    assert_eq!(
        "cifar10:a:b".parse::<DataSource>().unwrap(),
        DataSource::Cifar10(PathBuf::from("a:b"))
    );
    let msg = "imagenet".parse::<DataSource>().unwrap_err().to_string();
    assert!(msg.contains("\"imagenet\""), "{msg}");
    for form in [
        "auto",
        "bundled",
        "fashion-mnist:DIR",
        "cifar10:DIR",
        "synthetic:N:M",
    ] {
        assert!(msg.contains(form), "{msg}");
    }
}

#[test]
fn synthetic_source_loads() {
    let split = load(&"synthetic:64:16:3".parse().unwrap()).unwrap();
    assert_eq!(split.name, "synthetic");
    assert_eq!(split.origin, "synthetic(seed=3)");
    assert_eq!((split.train.len(), split.test.len()), (64, 16));
    assert_eq!(split.train, synthetic(64, 16, 3).train);
}

fn epoch(
    data: &Arc<octet_trainer::data::Dataset>,
    sampler: &Sampler,
    e: u64,
    prefetch: usize,
) -> Vec<Batch> {
    let cfg = LoaderConfig {
        batch_size: 32,
        augment: Some(Augment::standard()),
        seed: 11,
        prefetch,
    };
    let loader = Loader::new(data.clone(), sampler, e, &cfg);
    assert_eq!(loader.num_batches(), sampler.num_samples().div_ceil(32));
    let batches: Vec<Batch> = loader.collect();
    assert_eq!(batches.len(), sampler.num_samples().div_ceil(32));
    batches
}

#[test]
fn loader_is_reproducible() {
    let data = Arc::new(synthetic(200, 0, 5).train);
    let sampler = Sampler::new(data.len(), true, 11);
    let a = epoch(&data, &sampler, 3, 2);
    // Same epoch: identical batches, whatever the prefetch depth.
    assert_eq!(a, epoch(&data, &sampler, 3, 0));
    assert_eq!(a, epoch(&data, &sampler, 3, 16));
    // Another epoch: different order and augmentation.
    assert_ne!(a, epoch(&data, &sampler, 4, 2));
    // The last partial batch is kept: 200 = 6·32 + 8.
    assert_eq!(a.iter().map(|b| b.len).sum::<usize>(), 200);
    assert_eq!(a.last().map(|b| b.len), Some(8));
    for b in &a {
        assert_eq!(b.images.len(), b.len * 3 * 32 * 32);
        assert_eq!(b.labels.len(), b.len);
    }
}

#[test]
fn loader_ranks_split_the_epoch() {
    let data = Arc::new(synthetic(100, 0, 1).train);
    let mut labels_seen = 0;
    for rank in 0..3 {
        let sampler = Sampler::new(100, true, 2)
            .with_rank(rank, 3)
            .unwrap()
            .with_drop_last(true);
        let batches = epoch(&data, &sampler, 0, 1);
        labels_seen += batches.iter().map(|b| b.len).sum::<usize>();
    }
    assert_eq!(labels_seen, 99);
}

#[test]
fn dropping_a_loader_early_does_not_hang() {
    let data = Arc::new(synthetic(500, 0, 1).train);
    let sampler = Sampler::new(500, true, 0);
    for prefetch in [0, 1, 4] {
        let cfg = LoaderConfig {
            batch_size: 10,
            prefetch,
            ..LoaderConfig::default()
        };
        let mut loader = Loader::new(data.clone(), &sampler, 0, &cfg);
        assert!(loader.next().is_some());
        drop(loader);
    }
    // Never iterated at all.
    let cfg = LoaderConfig {
        batch_size: 10,
        prefetch: 2,
        ..LoaderConfig::default()
    };
    drop(Loader::new(data, &sampler, 1, &cfg));
}
