//! What several commands share: the commit they record, opening a checkpoint with its data,
//! running an `.o8` model.

use std::path::{Path, PathBuf};

use anyhow::Context;
use octet_models::Model;
use octet_trainer::checkpoint::{self, Checkpoint};
use octet_trainer::data::{self, DataSource, DataSplit, Dataset, Normalization};

/// The commit this binary was built from (build.rs), recorded in reports and checkpoints.
pub const COMMIT: &str = env!("OCTET_COMMIT");

/// `--model` of the commands that read a checkpoint.
pub const MODEL_HELP: &str = "Architecture, for checkpoints without octet metadata (PyTorch \
                              files) [default: the one the checkpoint's metadata names].";

/// A checkpoint, the architecture it holds and the data it belongs with.
pub struct Trained {
    pub ck: Checkpoint,
    pub model: Model,
    pub in_channels: usize,
    pub classes: usize,
    pub split: DataSplit,
    /// The normalisation the model was trained with (travels in the checkpoint).
    pub norm: Normalization,
}

impl Trained {
    /// What the exporter needs: architecture, tensors, normalisation, shapes.
    pub fn export_input(&self) -> octet_export::Input<'_> {
        octet_export::Input {
            model: &self.model,
            tensors: &self.ck.tensors,
            mean: &self.norm.mean,
            std: &self.norm.std,
            channels: self.in_channels,
            height: self.split.train.height,
            width: self.split.train.width,
            classes: self.classes,
        }
    }
}

/// Opens `path`; `model` names the architecture of files without octet metadata; `data`
/// overrides the data set the checkpoint was trained on.
pub fn open_trained(
    path: &Path,
    model: Option<&Model>,
    data: Option<&DataSource>,
) -> anyhow::Result<Trained> {
    // Finite tensors and consistent metadata (architecture, shapes, normalisation), before
    // any data is loaded.
    let ck = checkpoint::load_checked(path)?;
    let hint = model;
    let kind = ck.model(hint)?;
    if let Some(h) = hint.filter(|&h| *h != kind) {
        anyhow::bail!(
            "--model {h}, but {} is a {kind} checkpoint (its metadata says so): drop --model",
            path.display()
        );
    }
    // Names and shapes against the architecture, for the commands that use the tensors
    // without building the model (export).
    ck.check_model(&kind)?;
    let (in_channels, classes) = ck.io_shape(&kind)?;
    let source = match (data, &ck.meta) {
        (Some(d), _) => d.clone(),
        (None, Some(m)) => m.config.data.parse()?,
        (None, None) => DataSource::Auto,
    };
    let split = data::load(&source)?;
    anyhow::ensure!(
        split.train.channels == in_channels,
        "the checkpoint's model takes {in_channels}-channel images, {} has {}",
        split.name,
        split.train.channels
    );
    let norm = ck
        .meta
        .as_ref()
        .map(|m| m.normalization.clone())
        .unwrap_or(split.norm.clone());
    norm.check(in_channels)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(Trained {
        ck,
        model: kind,
        in_channels,
        classes,
        split,
        norm,
    })
}

/// The first `n` images of `ds` (all when `n` is 0 or larger than the set).
pub fn first(ds: &Dataset, n: usize) -> (&[u8], &[u8]) {
    let n = if n == 0 { ds.len() } else { n.min(ds.len()) };
    (&ds.images[..n * ds.image_len()], &ds.labels[..n])
}

/// Int8 logits of `pixels` through the runtime on `threads` threads.
pub fn run_o8(bytes: &[u8], pixels: &[u8], threads: usize) -> anyhow::Result<Vec<i8>> {
    run_o8_with(bytes, octet_runtime::Kernels::Auto, pixels, threads)
}

/// [`run_o8`] with the chosen kernels.
pub fn run_o8_with(
    bytes: &[u8],
    kernels: octet_runtime::Kernels,
    pixels: &[u8],
    threads: usize,
) -> anyhow::Result<Vec<i8>> {
    let model = octet_runtime::Model::parse(bytes)
        .map_err(|e| anyhow::anyhow!("invalid .o8 model: {e}"))?;
    // Each op's parameters once, not per op and image.
    let mut table = vec![octet_runtime::PreparedOp::EMPTY; model.num_ops()];
    // The weights the kernels read in their own order, packed once.
    let mut packed = vec![
        0u8;
        model
            .packed_bytes(kernels)
            .map_err(|e| anyhow::anyhow!("kernels: {e}"))?
    ];
    let model = model
        .prepare_packed(&mut table, &mut packed, kernels)
        .map_err(|e| anyhow::anyhow!("invalid .o8 model: {e}"))?;
    let batch = model
        .batch_of(pixels.len())
        .map_err(|e| anyhow::anyhow!("input: {e}"))?;
    anyhow::ensure!(threads >= 1, "the thread count must be at least 1");
    let mut arena = arena_for(&model, kernels, batch, threads)?;
    let logits =
        octet_runtime::parallel::run_parallel_with(&model, kernels, pixels, &mut arena, threads)
            .map_err(|e| anyhow::anyhow!("runtime: {e}"))?;
    Ok(logits.to_vec())
}

/// The zeroed arena `run_parallel` needs for `batch` images on `threads` threads, or an error
/// saying why it cannot be had: more than this machine's memory, or refused by the allocator.
/// Never an abort, whatever the model's (validated, but possibly large) arena size.
pub fn arena_for(
    model: &octet_runtime::Model,
    kernels: octet_runtime::Kernels,
    batch: usize,
    threads: usize,
) -> anyhow::Result<Vec<u8>> {
    let needed = octet_runtime::parallel::arena_bytes_parallel(model, kernels, batch, threads);
    let why = || {
        format!(
            "the model needs {needed} bytes of arena for {batch} image(s) on {threads} \
             thread(s) ({} bytes per image in flight, up to {} images per thread)",
            model.working_bytes(kernels),
            model.group_images(kernels)
        )
    };
    let memory = physical_memory();
    if needed == usize::MAX || memory.is_some_and(|m| needed as u64 > m) {
        anyhow::bail!(
            "{}, more than this machine's {} bytes of memory: use --threads 1 and fewer \
             --images, or a smaller model",
            why(),
            memory.unwrap_or(0)
        );
    }
    let mut arena = Vec::new();
    arena.try_reserve_exact(needed).map_err(|e| {
        anyhow::anyhow!(
            "{}, and they cannot be allocated ({e}): use --threads 1",
            why()
        )
    })?;
    arena.resize(needed, 0);
    Ok(arena)
}

/// Bytes of physical memory, where the OS says.
fn physical_memory() -> Option<u64> {
    #[cfg(unix)]
    {
        // SAFETY: sysconf has no preconditions.
        let (pages, size) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        if pages > 0 && size > 0 {
            return Some(pages as u64 * size as u64);
        }
    }
    None
}

/// Parses a count that must be at least 1 (`--threads`, `--batch-size`, …).
pub fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Fraction of rows of `logits` (`classes` wide) whose argmax equals the label.
pub fn accuracy(logits: &[i8], classes: usize, labels: &[u8]) -> f64 {
    let correct = logits
        .chunks(classes)
        .zip(labels)
        .filter(|(row, &y)| argmax(row) == y as usize)
        .count();
    correct as f64 / labels.len().max(1) as f64
}

/// Index of the largest value; the first on ties, as PyTorch's argmax.
pub fn argmax(row: &[i8]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best
}

/// Default number of worker threads: the machine's cores.
pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// The file a command writes from `model`: `out`, or the model's name with `ext`; never the
/// model itself.
pub fn out_path(model: &Path, out: Option<&Path>, ext: &str) -> anyhow::Result<PathBuf> {
    let out = out.map_or_else(|| model.with_extension(ext), Path::to_path_buf);
    anyhow::ensure!(
        out != model,
        "--out {} is the model itself: name another file",
        out.display()
    );
    Ok(out)
}

/// For commands that only print and exit (`inspect`, `describe`): a closed stdout (`| head`)
/// ends the process quietly, as it does other Unix tools, instead of `println!` panicking.
/// Not for commands with sockets (training, launch), where a peer's closed connection must
/// stay an error they report.
pub fn exit_quietly_on_closed_stdout() {
    #[cfg(unix)]
    // SAFETY: restores the default disposition of one signal before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

pub fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}
