//! Argument definitions and dispatch. Each subcommand lives in its own file and returns an
//! [`Outcome`]; errors carry context naming the file they concern.

mod inspect;
mod lower;
pub mod output;
mod progress;
mod rewrite;
mod run;
mod test;
mod verify;

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// What a successful run of a subcommand concluded.
pub enum Outcome {
    /// Everything succeeded (exit 0).
    Success,
    /// The command ran but a check it performs failed (exit 1).
    CheckFailed,
}

const EXAMPLES: &str = "\
Examples:
  multigather inspect fixtures/gather/gather_axis1.onnx
  multigather inspect model.onnx --json
  multigather rewrite model.onnx -o model.mg.onnx
  multigather rewrite model.onnx -o model.mg.onnx --with-function-body
  multigather rewrite model.onnx -o model.mg.onnx --diff
  multigather verify model.onnx --seed 1 --dim batch=2
  multigather verify model.onnx --input ids=ids.npy
  multigather lower model.mg.onnx -o model.lowered.onnx
  multigather run model.onnx --inputs test_data_set_0 --output-dir out
  multigather test tests/data/node

Exit codes: 0 success, 1 a check failed, 2 an error.";

/// Rewrites every ONNX gather into one GatherMultiaxis operator and proves the rewrite by running
/// the models.
#[derive(Parser, Debug)]
#[command(name = "multigather", version, about, after_help = EXAMPLES)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print a model in the text form, or its op histogram and I/O as JSON.
    Inspect {
        /// The model file.
        model: PathBuf,
        /// Print the op histogram, inputs and outputs as JSON instead.
        #[arg(long)]
        json: bool,
        /// Show tensors with up to this many elements in full.
        #[arg(long, default_value_t = 16)]
        max_elements: usize,
    },
    /// Rewrite every Gather / GatherElements / GatherND into GatherMultiaxis.
    Rewrite {
        /// The model file.
        model: PathBuf,
        /// Where to write the rewritten model (`-` for standard output).
        #[arg(short, long)]
        output: PathBuf,
        /// Allow the output to be the input file.
        #[arg(long)]
        in_place: bool,
        /// Print the per-node report as JSON on stdout.
        #[arg(long)]
        json: bool,
        /// Op kinds to rewrite (default: all three).
        #[arg(long, value_delimiter = ',')]
        ops: Vec<String>,
        /// Leave nodes whose name contains this text untouched (repeatable).
        #[arg(long)]
        skip: Vec<String>,
        /// Store tensors of at least --external-threshold bytes in this file beside the output.
        #[arg(long)]
        external_data: Option<String>,
        /// Size threshold for --external-data, in bytes.
        #[arg(long, default_value_t = 1024)]
        external_threshold: usize,
        /// Also define each GatherMultiaxis as a model-local function whose body is its lowering
        /// (one overload per distinct lowering, IR version 10), so runtimes that inline local
        /// functions run the rewritten model as it is.
        #[arg(long)]
        with_function_body: bool,
        /// Prove the rewrite before writing it: run both models on random inputs drawn from the
        /// declared types and compare every output bit for bit (exit 1, nothing written, if they
        /// differ). For chosen inputs or symbolic dims, use `verify` on the output.
        #[arg(long)]
        verify: bool,
        /// Print a unified diff of the text form, before and after the rewrite, on standard
        /// output (stable across runs and platforms: fit for snapshot tests).
        #[arg(long)]
        diff: bool,
    },
    /// Replace every GatherMultiaxis by standard ONNX operators (exit 1 if some cannot be).
    Lower {
        /// The model file.
        model: PathBuf,
        /// Where to write the lowered model (`-` for standard output).
        #[arg(short, long)]
        output: PathBuf,
        /// Allow the output to be the input file.
        #[arg(long)]
        in_place: bool,
    },
    /// Run a model with the reference interpreter.
    Run {
        /// The model file.
        model: PathBuf,
        /// A directory of input_K.pb / NAME.pb / NAME.npy files.
        #[arg(long)]
        inputs: Option<PathBuf>,
        /// One input as NAME=FILE (.pb or .npy); repeatable.
        #[arg(long = "input")]
        input: Vec<String>,
        /// Write outputs as output_K.pb into this directory.
        #[arg(long)]
        output_dir: Option<PathBuf>,
        /// Run the graph this many times after loading, for timing.
        #[arg(long, default_value_t = 1)]
        repeat: usize,
        /// Worker threads (default: all cores).
        #[arg(long)]
        threads: Option<usize>,
        /// Print timings and output shapes as JSON.
        #[arg(long)]
        json: bool,
        /// Memory budget for the tensors of a run, e.g. 8G, 512M or a byte count (default: the
        /// machine's physical memory).
        #[arg(long, value_parser = parse_size)]
        max_memory: Option<usize>,
        /// Time every node and print where the time went (per operator, then the slowest nodes)
        /// on stderr, or in the JSON with --json.
        #[arg(long)]
        profile: bool,
    },
    /// Rewrite in memory, run both models on the same inputs, compare every output bit for bit.
    Verify {
        /// The model file.
        model: PathBuf,
        /// Compare against this rewritten model instead of rewriting in memory.
        #[arg(long)]
        rewritten: Option<PathBuf>,
        /// A directory of inputs, as for `run`.
        #[arg(long)]
        inputs: Option<PathBuf>,
        /// One input as NAME=FILE (.pb or .npy), as for `run`; repeatable. Inputs not given
        /// are drawn.
        #[arg(long = "input")]
        input: Vec<String>,
        /// Draw the inputs not given (the default; accepted for scripts that pass it).
        #[arg(long)]
        random: bool,
        /// Seed of the drawn inputs.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Size of a symbolic dimension of the drawn inputs, as NAME=VALUE; repeatable (default:
        /// what the graph requires, else 1, larger sizes searched if the model fails).
        #[arg(long)]
        dim: Vec<String>,
        /// Print the comparison as JSON.
        #[arg(long)]
        json: bool,
        /// Memory budget for the tensors of each run, as for `run`.
        #[arg(long, value_parser = parse_size)]
        max_memory: Option<usize>,
    },
    /// Run ONNX test-data directories (model.onnx + test_data_set_N/) and compare outputs.
    Test {
        /// Test directories, or directories of test directories.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
    },
}

/// Runs one parsed command line.
pub fn run(args: Args) -> Result<Outcome> {
    match args.command {
        Command::Inspect {
            model,
            json,
            max_elements,
        } => inspect::run(&model, json, max_elements),
        Command::Rewrite {
            model,
            output,
            in_place,
            json,
            ops,
            skip,
            external_data,
            external_threshold,
            with_function_body,
            verify,
            diff,
        } => rewrite::run(rewrite::RewriteArgs {
            model: &model,
            output: &output,
            in_place,
            json,
            ops: &ops,
            skip: &skip,
            save: rewrite::save_options(external_data.as_ref(), external_threshold),
            with_function_body,
            verify,
            diff,
        }),
        Command::Lower {
            model,
            output,
            in_place,
        } => lower::run(lower::LowerArgs {
            model: &model,
            output: &output,
            in_place,
        }),
        Command::Run {
            model,
            inputs,
            input,
            output_dir,
            repeat,
            threads,
            json,
            max_memory,
            profile,
        } => run::run(run::RunArgs {
            model: &model,
            inputs: inputs.as_deref(),
            input: &input,
            output_dir: output_dir.as_deref(),
            repeat,
            threads,
            json,
            max_memory,
            profile,
        }),
        Command::Verify {
            model,
            rewritten,
            inputs,
            input,
            random: _,
            seed,
            dim,
            json,
            max_memory,
        } => verify::run(verify::VerifyArgs {
            model: &model,
            rewritten: rewritten.as_deref(),
            inputs: inputs.as_deref(),
            input: &input,
            seed,
            dims: &dim,
            json,
            max_memory,
        }),
        Command::Test { dirs } => test::run(&dirs),
    }
}

/// A byte count as given on the command line: a number with an optional K, M, G or T suffix
/// (powers of 1024, an optional trailing `B` or `iB`).
fn parse_size(text: &str) -> std::result::Result<usize, String> {
    let t = text.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (digits, shift) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 10),
        Some((i, 'M' | 'm')) => (&t[..i], 20),
        Some((i, 'G' | 'g')) => (&t[..i], 30),
        Some((i, 'T' | 't')) => (&t[..i], 40),
        _ => (t, 0),
    };
    let n: usize = digits
        .trim()
        .parse()
        .map_err(|_| format!("'{text}' is not a size (examples: 8G, 512M, 1000000)"))?;
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("'{text}' is too large"))
}

/// Loads a model, with a spinner on a terminal for large files; errors name the file.
pub fn load(path: &std::path::Path) -> Result<multigather::ir::Model> {
    use anyhow::Context;
    progress::spin("loading", path, 0, || multigather::io::load(path))
        .with_context(|| format!("loading {}", path.display()))
}

/// Saves a model atomically, with a spinner on a terminal for large models; errors name the file.
pub fn save(
    model: &multigather::ir::Model,
    path: &std::path::Path,
    options: &multigather::io::SaveOptions,
) -> Result<()> {
    use anyhow::Context;
    let hint = model
        .graph
        .initializers
        .iter()
        .map(|t| t.stored_len() as u64)
        .sum();
    let saved = progress::spin("saving", path, hint, || {
        multigather::io::save_with(model, path, options)
    });
    match saved {
        // A model sent to standard output, read by something that went away: see `main`.
        Err(multigather::Error::Io { cause, .. })
            if cause.kind() == std::io::ErrorKind::BrokenPipe
                && multigather::io::is_stdout_path(path) =>
        {
            Err(output::StdoutError(cause).into())
        }
        other => other.with_context(|| format!("saving {}", path.display())),
    }
}
