//! The options the commands take: what [`super::flags`] parsed, validated and typed by one
//! conversion, [`Options::from_args`], before any model is loaded. Op kinds are
//! [`GatherKind`]s, `NAME=FILE` and `NAME=VALUE` pairs are split and parsed, the output is
//! checked not to be the input (unless `--in-place`), and flags that would print on the same
//! standard output are refused together. A command never sees a raw string it has to check.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use multigather::interp::RunOptions;
use multigather::io::{is_stdout_path, ExternalPolicy, SaveOptions};
use multigather::pass::{GatherKind, RewriteConfig};

use super::flags::{
    Args, Command, InspectFlags, LowerFlags, RewriteFlags, RunFlags, TestFlags, VerifyFlags,
};

/// One command with its validated options.
pub enum Options {
    Inspect(Inspect),
    Rewrite(Rewrite),
    Lower(Lower),
    Run(Run),
    Verify(Verify),
    Test(Test),
}

/// Options of `multigather inspect`.
pub struct Inspect {
    pub model: PathBuf,
    pub json: bool,
    /// Tensors with up to this many elements are shown in full.
    pub max_elements: usize,
}

/// Options of `multigather rewrite`.
pub struct Rewrite {
    pub model: PathBuf,
    /// Where the model is written; not the input unless `--in-place` was given.
    pub output: PathBuf,
    /// What the pass rewrites (`--ops`, `--skip`).
    pub config: RewriteConfig,
    pub save: SaveOptions,
    pub with_function_body: bool,
    /// Prove the rewrite before writing it: both models run on inputs drawn as `verify` draws
    /// them (seed 0) and must agree bit for bit.
    pub verify: bool,
    /// What goes on standard output besides the model (which then goes to a file).
    pub stdout: RewriteStdout,
}

/// What `multigather rewrite` prints on standard output: at most one thing, and nothing when
/// the model itself goes there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RewriteStdout {
    Nothing,
    /// The per-node report as JSON (`--json`).
    Report,
    /// The unified diff of the text form before and after (`--diff`).
    Diff,
}

/// Options of `multigather lower`.
pub struct Lower {
    pub model: PathBuf,
    /// Where the model is written; not the input unless `--in-place` was given.
    pub output: PathBuf,
    /// `--target-opset`.
    pub config: multigather::pass::LowerConfig,
}

/// Inputs given on the command line: a directory (`--inputs`) and single files
/// (`--input NAME=FILE`, which override the directory's).
pub struct Inputs {
    pub dir: Option<PathBuf>,
    pub files: Vec<(String, PathBuf)>,
}

/// Options of `multigather run`.
pub struct Run {
    pub model: PathBuf,
    pub inputs: Inputs,
    pub output_dir: Option<PathBuf>,
    pub repeat: NonZeroUsize,
    pub run: RunOptions,
    pub json: bool,
}

/// Options of `multigather verify`.
pub struct Verify {
    pub model: PathBuf,
    pub rewritten: Option<PathBuf>,
    pub inputs: Inputs,
    pub seed: u64,
    /// Sizes of symbolic dims (`--dim NAME=VALUE`).
    pub dims: HashMap<String, usize>,
    pub json: bool,
    pub max_memory: Option<usize>,
}

/// Options of `multigather test`.
pub struct Test {
    pub dirs: Vec<PathBuf>,
}

impl Options {
    /// Validates a parsed command line. Errors name the flag and the value at fault.
    pub fn from_args(args: Args) -> Result<Options> {
        Ok(match args.command {
            Command::Inspect(InspectFlags {
                model,
                json,
                max_elements,
            }) => Options::Inspect(Inspect {
                model,
                json,
                max_elements,
            }),
            Command::Rewrite(flags) => Options::Rewrite(rewrite(flags)?),
            Command::Lower(LowerFlags {
                model,
                output,
                in_place,
                target_opset,
            }) => {
                check_output(&model, &output, in_place)?;
                let config = multigather::pass::LowerConfig { target_opset };
                Options::Lower(Lower {
                    model,
                    output,
                    config,
                })
            }
            Command::Run(flags) => Options::Run(run(flags)?),
            Command::Verify(flags) => Options::Verify(verify(flags)?),
            Command::Test(TestFlags { dirs }) => Options::Test(Test { dirs }),
        })
    }
}

fn rewrite(flags: RewriteFlags) -> Result<Rewrite> {
    check_output(&flags.model, &flags.output, flags.in_place)?;
    let model_on_stdout = is_stdout_path(&flags.output);
    if flags.json && model_on_stdout {
        bail!("--json prints the report on standard output, where the model goes; write the model to a file");
    }
    if flags.diff && model_on_stdout {
        bail!("--diff prints on standard output, where the model goes; write the model to a file");
    }
    let stdout = match (flags.json, flags.diff) {
        (true, true) => bail!("--diff and --json both print on standard output; give one of them"),
        (true, false) => RewriteStdout::Report,
        (false, true) => RewriteStdout::Diff,
        (false, false) => RewriteStdout::Nothing,
    };
    let external = match flags.external_data {
        Some(file) => ExternalPolicy::File {
            file,
            threshold: flags.external_threshold,
        },
        None => ExternalPolicy::Keep,
    };
    Ok(Rewrite {
        config: RewriteConfig {
            kinds: kinds(&flags.ops)?,
            skip: flags.skip,
        },
        model: flags.model,
        output: flags.output,
        save: SaveOptions { external },
        with_function_body: flags.with_function_body,
        verify: flags.verify,
        stdout,
    })
}

/// The most runs `run --repeat` makes: its timings are kept to take their median.
pub const MAX_REPEAT: usize = 1_000_000;

fn run(flags: RunFlags) -> Result<Run> {
    let Some(repeat) = NonZeroUsize::new(flags.repeat) else {
        bail!("--repeat must be at least 1");
    };
    if repeat.get() > MAX_REPEAT {
        bail!("--repeat {repeat} is more than the limit of {MAX_REPEAT} runs");
    }
    if let Some(n) = flags.threads {
        let options = RunOptions {
            threads: Some(n),
            ..RunOptions::default()
        };
        if let Err(e) = options.check() {
            bail!(
                "--threads {n}: {}",
                e.to_string().trim_start_matches("limit exceeded: ")
            );
        }
    }
    Ok(Run {
        inputs: inputs(flags.inputs, &flags.input)?,
        model: flags.model,
        output_dir: flags.output_dir,
        repeat,
        run: RunOptions {
            threads: flags.threads,
            max_memory: flags.max_memory,
            profile: flags.profile,
            ..RunOptions::default()
        },
        json: flags.json,
    })
}

fn verify(flags: VerifyFlags) -> Result<Verify> {
    Ok(Verify {
        inputs: inputs(flags.inputs, &flags.input)?,
        dims: dim_sizes(&flags.dim)?,
        model: flags.model,
        rewritten: flags.rewritten,
        seed: flags.seed,
        json: flags.json,
        max_memory: flags.max_memory,
    })
}

/// `--ops` values as op kinds (all three when none is given).
fn kinds(ops: &[String]) -> Result<Vec<GatherKind>> {
    if ops.is_empty() {
        return Ok(GatherKind::ONNX.to_vec());
    }
    ops.iter()
        .map(|o| {
            GatherKind::from_name(o).with_context(|| {
                format!(
                    "unknown op kind '{o}' in --ops (expected Gather, GatherElements or GatherND)"
                )
            })
        })
        .collect()
}

/// Refuses an output that is the input file unless `--in-place` allows it.
fn check_output(input: &Path, output: &Path, in_place: bool) -> Result<()> {
    if multigather::io::same_file(input, output) && !in_place {
        bail!(
            "output {} is the input file; pass --in-place to overwrite it",
            output.display()
        );
    }
    Ok(())
}

/// `--inputs DIR` and the `--input NAME=FILE` pairs.
fn inputs(dir: Option<PathBuf>, pairs: &[String]) -> Result<Inputs> {
    let files = pairs
        .iter()
        .map(|pair| match pair.split_once('=') {
            Some((name, file)) => Ok((name.to_owned(), PathBuf::from(file))),
            None => bail!("--input takes NAME=FILE, found '{pair}'"),
        })
        .collect::<Result<_>>()?;
    Ok(Inputs { dir, files })
}

/// The `--dim NAME=VALUE` pairs.
fn dim_sizes(pairs: &[String]) -> Result<HashMap<String, usize>> {
    pairs
        .iter()
        .map(|p| {
            let (name, value) = p
                .split_once('=')
                .with_context(|| format!("--dim takes NAME=VALUE, found '{p}'"))?;
            let value = value
                .parse::<usize>()
                .with_context(|| format!("--dim {name}: '{value}' is not a size"))?;
            Ok((name.to_owned(), value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// Parses and validates `argv` (without the program name).
    fn check(argv: &[&str]) -> Result<Options> {
        let args =
            Args::try_parse_from(std::iter::once("multigather").chain(argv.iter().copied()))?;
        Options::from_args(args)
    }

    /// A model file that exists, so that an output naming it is the input.
    fn existing_model() -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let model = dir.path().join("model.onnx");
        std::fs::write(&model, b"").expect("a file in it");
        let model = model.to_str().expect("a UTF-8 temporary path").to_owned();
        (dir, model)
    }

    #[test]
    fn conversion_errors_name_the_flag_and_value() {
        let (_dir, model) = existing_model();
        let m = model.as_str();
        for (argv, expected) in [
            (
                &[
                    "rewrite",
                    "m.onnx",
                    "-o",
                    "o.onnx",
                    "--ops",
                    "Gather,Gahter",
                ][..],
                "unknown op kind 'Gahter' in --ops (expected Gather, GatherElements or GatherND)",
            ),
            (
                &["rewrite", m, "-o", m],
                "is the input file; pass --in-place to overwrite it",
            ),
            (
                &["lower", m, "-o", m],
                "is the input file; pass --in-place to overwrite it",
            ),
            (
                &["rewrite", "m.onnx", "-o", "-", "--json"],
                "--json prints the report on standard output, where the model goes",
            ),
            (
                &["rewrite", "m.onnx", "-o", "-", "--diff"],
                "--diff prints on standard output, where the model goes",
            ),
            (
                &["rewrite", "m.onnx", "-o", "o.onnx", "--diff", "--json"],
                "--diff and --json both print on standard output; give one of them",
            ),
            (
                &["run", "m.onnx", "--repeat", "0"],
                "--repeat must be at least 1",
            ),
            (
                &["run", "m.onnx", "--repeat", "18446744073709551615"],
                "--repeat 18446744073709551615 is more than the limit of 1000000 runs",
            ),
            (
                &["run", "m.onnx", "--threads", "18446744073709551615"],
                "--threads 18446744073709551615: 18446744073709551615 threads is more than this \
                 machine takes",
            ),
            (
                &["run", "m.onnx", "--threads", "0"],
                "--threads 0: the thread count must be at least 1",
            ),
            (
                &["run", "m.onnx", "--input", "x.npy"],
                "--input takes NAME=FILE, found 'x.npy'",
            ),
            (
                &["verify", "m.onnx", "--input", "x=a.npy", "--input", "y"],
                "--input takes NAME=FILE, found 'y'",
            ),
            (
                &["verify", "m.onnx", "--dim", "batch"],
                "--dim takes NAME=VALUE, found 'batch'",
            ),
            (
                &["verify", "m.onnx", "--dim", "batch=-1"],
                "--dim batch: '-1' is not a size",
            ),
        ] {
            match check(argv) {
                Ok(_) => panic!("{argv:?} was accepted"),
                Err(e) => {
                    let message = format!("{e:#}");
                    assert!(message.contains(expected), "{argv:?}: {message}");
                }
            }
        }
    }

    #[test]
    fn conversion_types_what_it_accepts() {
        let (_dir, model) = existing_model();
        let m = model.as_str();
        let Ok(Options::Rewrite(rewrite)) = check(&[
            "rewrite",
            m,
            "-o",
            m,
            "--in-place",
            "--ops",
            "GatherND,Gather",
            "--diff",
            "--external-data",
            "w.bin",
        ]) else {
            panic!("rewrite --in-place was refused");
        };
        assert_eq!(
            rewrite.config.kinds,
            [GatherKind::GatherNd, GatherKind::Gather]
        );
        assert_eq!(rewrite.stdout, RewriteStdout::Diff);
        assert!(matches!(
            rewrite.save.external,
            ExternalPolicy::File { ref file, threshold: 1024 } if file == "w.bin"
        ));

        let Ok(Options::Verify(verify)) =
            check(&["verify", "m.onnx", "--dim", "n=3", "--input", "ids=a=b.npy"])
        else {
            panic!("verify was refused");
        };
        assert_eq!(verify.dims, HashMap::from([("n".to_owned(), 3)]));
        assert_eq!(
            verify.inputs.files,
            [("ids".to_owned(), PathBuf::from("a=b.npy"))]
        );
    }
}
