use std::path::{Path, PathBuf};

use anyhow::Context;
use candle_core::Device;
use clap::{Arg, Args};
use octet_models::{Model, ModelKind};
use octet_trainer::checkpoint::Checkpoint;
use octet_trainer::config::LrScaling;
use octet_trainer::data::{self, DataSource, DataSplit};
use octet_trainer::device::DeviceSpec;
use octet_trainer::dist::{self, DistEnv};
use octet_trainer::dist::{BnMode, BucketTail, GradCompress};
use octet_trainer::metrics::EpochRecord;
use octet_trainer::optim::Schedule;
use octet_trainer::train::{RunOptions, Summary, TrainConfig, Trainer};
use octet_trainer::Precision;
use octet_trainer::{atomic, checkpoint};

use super::common::at_least_one;
use super::curves::{self, Curves};
use super::restart::{Attempt, Start};
use super::values;

/// The settings a fresh run takes from `TrainConfig` are shown as `[default: …]` by
/// [`show_defaults`]; they are not clap defaults, since a resumed run keeps its own unless the
/// flag is given.
#[derive(Args)]
#[command(mut_args(show_defaults))]
pub struct TrainArgs {
    /// Architecture: a built-in network or a .toml/.json description file.
    #[arg(long, short, value_parser = values::model(), long_help = octet_models::model_help("Architecture."))]
    model: Option<Model>,
    /// Data: auto (full Fashion-MNIST if installed, else the bundled subset), bundled,
    /// fashion-mnist[:DIR], cifar10:DIR, synthetic[:TRAIN[:TEST[:SEED]]].
    #[arg(long, short, value_parser = values::data())]
    data: Option<DataSource>,
    /// Epochs in the whole run (a resumed run counts the epochs already done).
    #[arg(long, short, value_parser = at_least_one)]
    epochs: Option<usize>,
    /// Images per optimiser step.
    #[arg(long, short, value_parser = at_least_one)]
    batch_size: Option<usize>,
    /// Peak learning rate.
    #[arg(long, value_parser = values::positive)]
    lr: Option<f64>,
    /// SGD momentum, in [0, 1).
    #[arg(long, value_parser = values::below_one)]
    momentum: Option<f64>,
    /// L2 penalty added to the gradient, as PyTorch's SGD does.
    #[arg(long, value_parser = values::non_negative)]
    weight_decay: Option<f64>,
    /// Learning-rate schedule.
    #[arg(long)]
    schedule: Option<Schedule>,
    /// With --schedule step: multiply the rate by --gamma every this many epochs.
    #[arg(long, default_value_t = step_default().0, value_parser = at_least_one)]
    step_every: usize,
    /// With --schedule step: the factor applied to the rate every --step-every epochs.
    #[arg(long, default_value_t = step_default().1, value_parser = values::positive)]
    gamma: f64,
    /// Linear warm-up from lr/steps to lr over this many epochs (fractions allowed).
    #[arg(long, value_parser = values::non_negative)]
    warmup_epochs: Option<f64>,
    /// Seeds weights, shuffling and augmentation: the same seed gives the same run on CPU.
    #[arg(long)]
    seed: Option<u64>,
    /// Train without random crop and flip.
    #[arg(long)]
    no_augment: bool,
    /// Images per forward pass when testing.
    #[arg(long, value_parser = at_least_one)]
    eval_batch_size: Option<usize>,
    /// cpu, cuda or cuda:N (in a data-parallel job each rank takes the GPU of its local rank).
    #[arg(long, default_value = "cpu", value_parser = values::device())]
    device: DeviceSpec,
    /// Directory for last.safetensors and metrics.csv [default: runs/<model>-<data>].
    #[arg(long, short)]
    out: Option<PathBuf>,
    /// Continue the run of this checkpoint; flags given here override its settings, the others
    /// keep the run's (not the defaults shown here).
    #[arg(long)]
    resume: Option<PathBuf>,
    /// Start from the weights of this checkpoint instead of random ones (fine-tuning): an
    /// octet checkpoint, or a PyTorch state_dict (a torch.save .pth, or safetensors) with
    /// --model. The optimiser, epoch count and schedule start afresh.
    #[arg(long, value_name = "CHECKPOINT", conflicts_with = "resume")]
    init: Option<PathBuf>,
    /// Stop after this many epochs of this invocation (continue later with --resume).
    #[arg(long, value_parser = super::common::at_least_one)]
    stop_after: Option<usize>,
    /// Do not draw curves.png (loss, accuracy and, on several GPUs, images/s per epoch),
    /// which is otherwise redrawn beside metrics.csv after every epoch.
    #[arg(long)]
    no_plots: bool,
    /// One JSON line per epoch on stdout instead of text and a progress bar.
    #[arg(long)]
    json: bool,
    /// Add the gradients of this many micro-batches before each synchronisation and step.
    #[arg(long, value_parser = at_least_one)]
    accumulate: Option<usize>,
    /// Data-parallel runs: gradient all-reduce bucket size in MiB.
    #[arg(long, value_parser = values::positive)]
    bucket_mb: Option<f64>,
    /// Data-parallel runs: whether the last gradient buckets are small (they hold the first
    /// layers' gradients, done only when backward ends).
    #[arg(long, ignore_case = true, default_value = "auto")]
    bucket_tail: BucketTail,
    /// Data-parallel runs: what the gradient all-reduce sends.
    #[arg(long, ignore_case = true)]
    grad_compress: Option<GradCompress>,
    /// Data-parallel runs: all-reduce every bucket after backward instead of starting each
    /// during backward as soon as its gradients are done (same results; for comparison).
    #[arg(long)]
    no_overlap: bool,
    /// Data-parallel runs: what batch norm does across ranks.
    #[arg(long, ignore_case = true)]
    bn: Option<BnMode>,
    /// How the learning rate follows the global batch.
    #[arg(long, ignore_case = true)]
    lr_scaling: Option<LrScaling>,
    /// The global batch at which --lr applies unscaled.
    #[arg(long, value_parser = at_least_one)]
    base_batch: Option<usize>,
    /// Data-parallel runs: seconds to wait for the other ranks at start-up, for a
    /// collective to finish, and for this rank to reach its next collective while an earlier
    /// one is unfinished, before deciding a peer has died and ending the rank.
    #[arg(long, default_value_t = 300)]
    dist_timeout: u64,
    /// CUDA: full-f32 convolutions (by default cuDNN may use TF32 tensor cores, as PyTorch
    /// does); slower, for runs that must agree closely with the CPU or another GPU count.
    #[arg(long)]
    no_tf32: bool,
    /// The arithmetic of training. Kept by --resume unless given.
    #[arg(long, ignore_case = true)]
    precision: Option<Precision>,
    /// Write each rank's per-step timeline (host and device times of every step and
    /// all-reduce, one clock) as CSV into this directory; `bench/timeline.py` summarises it.
    #[arg(long, value_name = "DIR")]
    timeline: Option<PathBuf>,
}

/// A fresh run's settings: `TrainConfig`'s, with a built-in network's own epochs.
fn fresh_config(model: &Model) -> TrainConfig {
    let mut c = TrainConfig::new(model, &DataSource::Auto.to_string());
    if let Some(epochs) = model.kind().and_then(ModelKind::epochs) {
        c.epochs = epochs;
    }
    c
}

/// `--step-every` and `--gamma` of `--schedule step` alone.
fn step_default() -> (usize, f64) {
    match Schedule::STEP {
        Schedule::Step { every, gamma } => (every, gamma),
        _ => unreachable!("Schedule::STEP is a step schedule"),
    }
}

/// Appends `[default: …]`, as clap prints it, to the help of each setting a fresh run takes
/// from [`fresh_config`].
fn show_defaults(arg: Arg) -> Arg {
    let c = fresh_config(&ModelKind::LENET.into());
    let shown = match arg.get_id().as_str() {
        "model" => c.model,
        "data" => c.data,
        "epochs" => {
            // The usual count, then the networks that differ from it.
            let epochs = ModelKind::all()
                .iter()
                .map(|&k| (k, fresh_config(&k.into()).epochs));
            let usual = c.epochs;
            let others: Vec<String> = epochs
                .filter(|(_, e)| *e != usual)
                .map(|(k, e)| format!("{e} for {k}"))
                .collect();
            match others.is_empty() {
                true => usual.to_string(),
                false => format!("{usual}; {}", others.join(", ")),
            }
        }
        "batch_size" => c.batch_size.to_string(),
        "eval_batch_size" => c.eval_batch_size.to_string(),
        "lr" => c.lr.to_string(),
        "momentum" => c.momentum.to_string(),
        "weight_decay" => c.weight_decay.to_string(),
        "schedule" => c.schedule.to_string(),
        "warmup_epochs" => c.warmup_epochs.to_string(),
        "seed" => c.seed.to_string(),
        "accumulate" => c.accumulate.to_string(),
        "bucket_mb" => c.bucket_mb.to_string(),
        "grad_compress" => c.grad_compress.to_string(),
        "bn" => c.bn.to_string(),
        "lr_scaling" => c.lr_scaling.to_string(),
        "base_batch" => c.base_batch.to_string(),
        "precision" => c.precision.to_string(),
        _ => return arg,
    };
    // Where clap puts its own: after the text in `-h`, a paragraph of its own in `--help`.
    let tail = format!("[default: {shown}]");
    let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
    let long = arg
        .get_long_help()
        .map_or(help.clone(), ToString::to_string);
    arg.help(format!("{help} {tail}"))
        .long_help(format!("{long}\n\n{tail}"))
}

impl TrainArgs {
    /// Built-in defaults, or the resumed run's settings, overridden by what the user gave.
    fn config(&self, base: Option<TrainConfig>) -> anyhow::Result<TrainConfig> {
        let mut c = match base {
            Some(c) => c,
            None => fresh_config(self.model.as_ref().unwrap_or(&ModelKind::LENET.into())),
        };
        if let Some(kind) = &self.model {
            anyhow::ensure!(
                kind.name() == c.model && kind.described() == c.net.as_ref(),
                "--model {kind} differs from the resumed checkpoint's {}",
                c.model
            );
        }
        if let Some(d) = &self.data {
            c.data = d.to_string();
        }
        macro_rules! set {
            ($($f:ident),*) => { $(if let Some(v) = self.$f { c.$f = v; })* };
        }
        set!(
            epochs,
            batch_size,
            lr,
            momentum,
            weight_decay,
            warmup_epochs,
            seed,
            eval_batch_size
        );
        if let Some(s) = self.schedule {
            c.schedule = match s {
                Schedule::Step { .. } => Schedule::Step {
                    every: self.step_every,
                    gamma: self.gamma,
                },
                other => other,
            };
        }
        if self.no_augment {
            c.augment = false;
        }
        set!(
            accumulate,
            bucket_mb,
            grad_compress,
            base_batch,
            bn,
            lr_scaling,
            precision
        );
        c.overlap = !self.no_overlap;
        c.bucket_tail = self.bucket_tail;
        c.ops.tf32 = !self.no_tf32;
        Ok(c)
    }

    /// The run's configuration (the resumed checkpoint's with these flags over it), checked,
    /// with more epochs to train than `resume` has done.
    fn checked_config(&self, resume: Option<&Checkpoint>) -> anyhow::Result<TrainConfig> {
        let base =
            match resume {
                Some(ck) => Some(ck.meta.as_ref().map(|m| m.config.clone()).with_context(
                    || {
                        format!(
                            "{} has no octet metadata: it cannot be resumed",
                            ck.path.display()
                        )
                    },
                )?),
                None => None,
            };
        let cfg = self.config(base)?;
        cfg.validate().map_err(|e| match &self.resume {
            Some(p) => anyhow::anyhow!(
                "{e} (in the run configuration stored in {}, with the flags given here)",
                p.display()
            ),
            None => e.into(),
        })?;
        if let Some((ck, m)) = resume.and_then(|ck| Some((ck, ck.meta.as_ref()?))) {
            anyhow::ensure!(
                m.epoch < cfg.epochs,
                "nothing to train: {} has finished {} epoch(s) and the run has {}: give --epochs \
                 above {} to train further",
                ck.path.display(),
                m.epoch,
                cfg.epochs,
                m.epoch
            );
        }
        Ok(cfg)
    }

    /// `--device`, or in a data-parallel job (`env`) this rank's GPU (`DistEnv::gpu`).
    fn device(&self, env: Option<&DistEnv>) -> anyhow::Result<Device> {
        Ok(match env {
            Some(e) => {
                anyhow::ensure!(
                    self.device.cuda_ordinal().is_some(),
                    "a data-parallel run ({} ranks) trains on GPUs: add --device cuda",
                    e.world
                );
                DeviceSpec::Cuda(e.gpu).open()?
            }
            None => self.device.open()?,
        })
    }
}

pub fn run(a: TrainArgs) -> anyhow::Result<()> {
    // Where this process stands in the job first: a wrong variable fails before any loading.
    let env = DistEnv::from_env()?.filter(|e| e.world > 1);
    let main_rank = env.as_ref().is_none_or(|e| e.rank == 0);
    if let Some(e) = env.as_ref().filter(|_| main_rank) {
        eprintln!("octet train: {}", e.describe());
    }
    let attempt = Attempt::from_env()?;
    // Finite tensors and consistent metadata, before anything else.
    let mut resume = match &a.resume {
        Some(p) => Some(checkpoint::load_checked(p)?),
        None => None,
    };
    let mut init = match &a.init {
        Some(p) => Some(checkpoint::load_checked(p)?),
        None => None,
    };
    if let Some(ck) = &init {
        // A file without octet metadata does not say its architecture: --model must.
        ck.model(a.model.as_ref())?;
    }
    let mut cfg = a.checked_config(resume.as_ref())?;
    let source: DataSource = cfg.data.parse()?;
    let split = data::load(&source)?;
    let out = a.out.clone().unwrap_or_else(|| match &a.resume {
        Some(p) => p.parent().map(PathBuf::from).unwrap_or_default(),
        None => PathBuf::from("runs").join(format!("{}-{}", cfg.model, split.name)),
    });
    match attempt.start(&out) {
        Start::AsGiven => {}
        Start::StaleIgnored(last) => {
            if main_rank {
                eprintln!(
                    "restart {} of {}: {} predates this job, not resumed; starting as the flags say",
                    attempt.restart,
                    attempt.allowed,
                    last.display()
                );
            }
        }
        Start::Resume(last) => {
            let ck = checkpoint::load_checked(&last)?;
            let done = ck.meta.as_ref().map_or(0, |m| m.epoch);
            if main_rank {
                eprintln!(
                    "restart {} of {}: resuming from {} (after epoch {done})",
                    attempt.restart,
                    attempt.allowed,
                    last.display()
                );
            }
            if done >= cfg.epochs {
                if main_rank {
                    eprintln!(
                        "the run had finished all {} epochs: nothing left to train",
                        cfg.epochs
                    );
                }
                return Ok(());
            }
            cfg = a.checked_config(Some(&ck))?;
            resume = Some(ck);
            init = None;
        }
    }
    let device = a.device(env.as_ref())?;
    if main_rank {
        prepare_run_dir(&out)?;
    }
    let timeout = std::time::Duration::from_secs(a.dist_timeout);
    let coll = dist::connect(env.as_ref(), &device, timeout, timeout)?;
    let talk = !a.json && main_rank;
    if talk {
        announce(&cfg, &split, coll.world(), a.device);
    }
    let mut trainer = Trainer::with_collective(cfg.clone(), split, &device, resume.as_ref(), coll)?;
    if resume.is_some() && talk {
        eprintln!("resuming after epoch {}", trainer.epochs_done());
    }
    if let Some(ck) = &init {
        trainer.init_from(ck)?;
        if talk {
            eprintln!("starting from the weights of {}", ck.path.display());
        }
    }
    let opts = RunOptions {
        out: Some(out.clone()),
        stop_after: a.stop_after,
        progress: talk,
        commit: super::common::COMMIT.into(),
        timeline: a.timeline.clone(),
        ..RunOptions::new(device)
    };
    let json = a.json;
    let epochs = cfg.epochs;
    let mut curves = (main_rank && !a.no_plots).then(|| Curves::new(&out, trainer.history()));
    let summary = trainer.run(&opts, &mut |r| {
        if main_rank {
            print_epoch(r, epochs, json)
        }
        if let Some(c) = curves.as_mut() {
            c.push(r);
        }
    })?;
    let plotted = curves.is_some();
    drop(curves); // waits for the last drawing
    if main_rank {
        print_done(&summary, &out, plotted, json);
    }
    Ok(())
}

/// The run's one-line description on stderr, before the first epoch.
fn announce(cfg: &TrainConfig, split: &DataSplit, world: usize, device: DeviceSpec) {
    eprintln!(
        "octet train: {} ({}) on {} ({} train / {} test images from {}), {} epochs, batch {}{}, lr {} {}, device {}",
        cfg.model,
        cfg.precision,
        split.name,
        split.train.len(),
        split.test.len(),
        split.origin,
        cfg.epochs,
        cfg.batch_size,
        if world > 1 {
            format!(" per GPU × {world} GPUs = {}", cfg.global_batch(world))
        } else {
            String::new()
        },
        cfg.effective_lr(world),
        cfg.schedule,
        device
    );
}

/// Where the checkpoint, the metrics and (when `plotted`) their curves went: a JSON `done`
/// event, or a line on stderr.
fn print_done(summary: &Summary, out: &Path, plotted: bool, json: bool) {
    let curves = out.join(curves::FILE);
    let curves = (plotted && curves.is_file()).then_some(curves);
    if json {
        let done = serde_json::json!({
            "event": "done",
            "epochs_done": summary.epochs_done,
            "checkpoint": summary.checkpoint,
            "metrics_csv": out.join("metrics.csv"),
            "curves_png": curves,
        });
        println!("{done}");
    } else if let Some(p) = &summary.checkpoint {
        eprintln!(
            "checkpoint: {}  metrics: {}{}",
            p.display(),
            out.join("metrics.csv").display(),
            curves
                .map(|c| format!("  curves: {}", c.display()))
                .unwrap_or_default()
        );
    }
}

/// The run directory, checked before the first epoch rather than at its end: a directory (made
/// if missing) this process can write in, with no directory where a file goes; temporaries left
/// by an interrupted checkpoint write (`last.safetensors.PID.tmp`) are removed.
pub fn prepare_run_dir(out: &Path) -> anyhow::Result<()> {
    const FILES: [&str; 3] = [checkpoint::LAST_FILE, "metrics.csv", curves::FILE];
    const PROBE: &str = ".octet-probe";
    anyhow::ensure!(
        !out.exists() || out.is_dir(),
        "--out {}: a file of that name exists; the run directory holds {}: name a directory",
        out.display(),
        FILES.join(", ")
    );
    std::fs::create_dir_all(out)
        .with_context(|| format!("--out {}: cannot create the run directory", out.display()))?;
    for f in FILES {
        let p = out.join(f);
        anyhow::ensure!(
            !p.is_dir(),
            "{} is a directory, where the run writes a file: remove it or choose another --out",
            p.display()
        );
    }
    let removed = atomic::remove_stale_temporaries(out, &[FILES[0], FILES[1], PROBE])?;
    for p in removed {
        eprintln!(
            "octet train: removed {} (left by a checkpoint write that was interrupted)",
            p.display()
        );
    }
    let probe = out.join(atomic::temporary_name(PROBE, std::process::id()));
    std::fs::write(&probe, b"")
        .with_context(|| format!("--out {}: cannot write in the run directory", out.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

pub fn print_epoch(r: &EpochRecord, epochs: usize, json: bool) {
    if json {
        let mut v = serde_json::to_value(r).unwrap_or_default();
        v["event"] = "epoch".into();
        println!("{v}");
        return;
    }
    let test = r
        .test_accuracy
        .map(|a| format!("test {:.2}%", 100.0 * a))
        .unwrap_or_else(|| "test -".into());
    let t = &r.times;
    let comm = if r.world > 1 {
        let hidden = t
            .comm_hidden_share()
            .map_or(String::new(), |h| format!(", {:.0}% hidden", 100.0 * h));
        format!(
            ", all-reduce {:.2} at {:.0} GB/s busbw, waiting for peers {:.2}{hidden}",
            t.comm_s, t.busbw_gbs, t.comm_wait_s
        )
    } else {
        String::new()
    };
    println!(
        "epoch {:>3}/{epochs}  loss {:.4}  train {:.2}%  {test}  {:.1} s (data {:.2}, h2d {:.2}, compute {:.2}{comm}, eval {:.2})  {:.0} img/s",
        r.epoch,
        r.train_loss,
        100.0 * r.train_accuracy,
        t.train_s,
        t.data_s,
        t.h2d_s,
        t.compute_s,
        t.eval_s,
        r.images_per_s
    );
    if let Some(tail) = r.bucket_tail {
        println!(
            "  --bucket-tail auto: {}",
            if tail {
                "small last buckets from here on (backward outlasts the all-reduce, so only \
                 what is left after it shows)"
            } else {
                "PyTorch DDP's buckets kept (the all-reduce outlasts backward: fewer, larger \
                 buckets move it faster)"
            }
        );
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;

    #[derive(Parser)]
    struct Train {
        #[command(flatten)]
        a: TrainArgs,
    }

    fn config(args: &[&str]) -> TrainConfig {
        let a = Train::try_parse_from([&["train"][..], args].concat())
            .unwrap()
            .a;
        a.config(None).unwrap()
    }

    /// The flags give the configuration their strings gave before they were typed, in any case
    /// where the parsers ignored it.
    #[test]
    fn flags_parse_to_the_same_configuration() {
        let mut want = TrainConfig::new(ModelKind::LENET, "auto");
        want.ops.tf32 = true;
        assert_eq!(config(&[]), want);

        let mut want = TrainConfig::new(ModelKind::RESNET18, "synthetic:64:8");
        want.epochs = 10;
        want.schedule = Schedule::Step {
            every: 5,
            gamma: 0.5,
        };
        want.bn = BnMode::Sync;
        want.lr_scaling = LrScaling::Linear;
        want.precision = Precision::Bf16;
        want.lr = 0.05;
        want.momentum = 0.8;
        want.ops.tf32 = false;
        let got = config(&[
            "--model",
            "ResNet-18",
            "--data",
            "synthetic:64:8",
            "--schedule",
            "step",
            "--step-every",
            "5",
            "--gamma",
            "0.5",
            "--bn",
            "SYNC",
            "--lr-scaling",
            "Linear",
            "--precision",
            "BF16",
            "--lr",
            "0.05",
            "--momentum",
            "0.8",
            "--no-tf32",
        ]);
        assert_eq!(got, want);
        // The checkpoint's strings keep their format.
        assert_eq!(got.model, "resnet18");
        assert_eq!(got.data, "synthetic:64:8");
    }

    /// `--help` shows the defaults a fresh run takes.
    #[test]
    fn help_shows_the_configuration_defaults() {
        let help = Train::command().render_help().to_string();
        let c = TrainConfig::new(ModelKind::LENET, "auto");
        for shown in [
            format!("Peak learning rate [default: {}]", c.lr),
            format!("[default: {}]", c.batch_size),
            format!("[default: {}]", c.weight_decay),
            "[default: 15; 10 for resnet18]".into(),
            "[default: cosine]".into(),
        ] {
            assert!(help.contains(&shown), "no {shown:?} in:\n{help}");
        }
    }
}
