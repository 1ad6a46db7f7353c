//! The command line explains itself: every argument of every command has help text, shows its
//! default (or is one whose absence means "off"), and lists its choices with a line each; the
//! README's commands parse.

use clap::{Arg, Command, CommandFactory, Parser};

use super::Cli;

/// Optional arguments without a default: leaving them out turns something off or picks an
/// input, as their help says. A new argument with a value needs a clap default, a
/// `[default: …]` in its help, or a place here.
const OFF_WHEN_ABSENT: &[&str] = &[
    "octet train --resume",
    "octet train --init",
    "octet train --stop-after",
    "octet train --timeline",
    "octet export --report",
    "octet run --predictions",
    "octet run --logits",
    "octet run --inputs",
    "octet bench train --out",
    "octet bench infer --peer",
    "octet bench infer --files",
    "octet bench allreduce --out",
    "octet bench scaling --accuracy-data",
    "octet bench scaling --peer",
    "octet bench scaling --render",
    "octet launch --program",
];

/// Every command below `cmd` (itself included) with its path (`octet bench train`).
fn commands(cmd: &Command, path: &str, out: &mut Vec<(String, Command)>) {
    out.push((path.to_string(), cmd.clone()));
    for sub in cmd.get_subcommands() {
        commands(sub, &format!("{path} {}", sub.get_name()), out);
    }
}

fn built() -> Vec<(String, Command)> {
    let mut cli = Cli::command();
    cli.build();
    let mut all = Vec::new();
    commands(&cli, "octet", &mut all);
    all
}

/// `--long`, or the value name of a positional.
fn spelled(a: &Arg) -> String {
    match a.get_long() {
        Some(l) => format!("--{l}"),
        None => a
            .get_value_names()
            .and_then(|v| v.first())
            .map_or_else(|| a.get_id().to_string(), ToString::to_string),
    }
}

fn help(a: &Arg) -> String {
    a.get_long_help()
        .or(a.get_help())
        .map(ToString::to_string)
        .unwrap_or_default()
}

#[test]
fn every_argument_has_help_and_shows_its_default() {
    let mut missing = Vec::new();
    let mut checked = 0;
    for (path, cmd) in built() {
        for a in cmd.get_arguments() {
            if matches!(a.get_id().as_str(), "help" | "version") {
                continue;
            }
            checked += 1;
            let name = format!("{path} {}", spelled(a));
            let text = help(a);
            if text.trim().is_empty() {
                missing.push(format!("{name}: no help text"));
            }
            let takes_value = a.get_num_args().is_some_and(|n| n.takes_values());
            let shown = !a.get_default_values().is_empty() && !a.is_hide_default_value_set()
                || text.contains("[default: ");
            // Positionals are required or, for `launch`, the rest of the line.
            let flag = a.get_index().is_none() && !a.is_required_set();
            if takes_value && flag && !shown && !OFF_WHEN_ABSENT.contains(&name.as_str()) {
                missing.push(format!("{name}: no default shown"));
            }
            for v in a.get_possible_values() {
                if v.get_help().is_none() && !v.is_hide_set() {
                    missing.push(format!("{name} {}: no help for the value", v.get_name()));
                }
            }
        }
    }
    assert!(checked > 80, "only {checked} arguments found");
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// Every entry of the list still names an argument (a renamed flag must leave it).
#[test]
fn off_when_absent_names_real_arguments() {
    let all: Vec<String> = built()
        .iter()
        .flat_map(|(path, cmd)| {
            cmd.get_arguments()
                .map(|a| format!("{path} {}", spelled(a)))
                .collect::<Vec<_>>()
        })
        .collect();
    for name in OFF_WHEN_ABSENT {
        assert!(all.iter().any(|a| a == name), "{name} is no argument");
    }
}

/// The README's `octet …` lines parse (all but those with `...` in place of arguments).
#[test]
fn readme_commands_parse() {
    let readme = include_str!("../../README.md");
    let mut parsed = 0;
    for line in readme.lines().filter(|l| l.starts_with("octet ")) {
        let command = line.split(" #").next().unwrap_or(line);
        if command.contains("...") || command.contains('…') {
            continue;
        }
        let words: Vec<&str> = command.split_whitespace().collect();
        if let Err(e) = Cli::try_parse_from(&words) {
            panic!("{command}:\n{e}");
        }
        parsed += 1;
    }
    assert!(parsed >= 8, "only {parsed} README commands found");
}

/// The octet command of each committed sbatch example parses, with sample values for the
/// shell's variables.
#[test]
fn sbatch_examples_parse() {
    let files = [
        include_str!("../../deploy/slurm/srun.sbatch"),
        include_str!("../../deploy/slurm/launch.sbatch"),
    ];
    let sample = [
        ("\"$SLURM_NNODES\"", "2"),
        ("\"$SLURM_NODEID\"", "1"),
        ("\"$head\"", "gpu01"),
        ("$SLURM_JOB_ID", "1234"),
    ];
    for file in files {
        let line = file
            .lines()
            .find_map(|l| l.strip_prefix("srun "))
            .expect("an srun line");
        let mut command = line.to_string();
        for (var, value) in sample {
            command = command.replace(var, value);
        }
        assert!(!command.contains('$'), "{command}");
        let words: Vec<&str> = command.split_whitespace().collect();
        if let Err(e) = Cli::try_parse_from(&words) {
            panic!("{command}:\n{e}");
        }
        // What `octet launch` runs on every rank, after `--`, is an octet command too.
        if let Some(at) = words.iter().position(|w| *w == "--") {
            let rank = [&["octet"], &words[at + 1..]].concat();
            if let Err(e) = Cli::try_parse_from(&rank) {
                panic!("{}:\n{e}", rank.join(" "));
            }
        }
    }
}

#[test]
fn clap_finds_no_inconsistency() {
    Cli::command().debug_assert();
}
