//! The command line as clap parses it: raw flags, one struct per subcommand, each flag declared
//! once. Nothing here is checked beyond what clap checks; [`super::options`] turns these into
//! the validated options the commands take.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

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
    Inspect(InspectFlags),
    /// Rewrite every Gather / GatherElements / GatherND into GatherMultiaxis.
    Rewrite(RewriteFlags),
    /// Replace every GatherMultiaxis by standard ONNX operators (exit 1 if some cannot be).
    Lower(LowerFlags),
    /// Run a model with the reference interpreter.
    Run(RunFlags),
    /// Rewrite in memory, run both models on the same inputs, compare every output bit for bit.
    Verify(VerifyFlags),
    /// Run ONNX test-data directories (model.onnx + test_data_set_N/) and compare outputs.
    Test(TestFlags),
}

#[derive(clap::Args, Debug)]
pub struct InspectFlags {
    /// The model file.
    pub model: PathBuf,
    /// Print the op histogram, inputs and outputs as JSON instead.
    #[arg(long)]
    pub json: bool,
    /// Show tensors with up to this many elements in full.
    #[arg(long, default_value_t = 16)]
    pub max_elements: usize,
}

#[derive(clap::Args, Debug)]
pub struct RewriteFlags {
    /// The model file.
    pub model: PathBuf,
    /// Where to write the rewritten model (`-` for standard output).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Allow the output to be the input file.
    #[arg(long)]
    pub in_place: bool,
    /// Print the per-node report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Op kinds to rewrite (default: all three).
    #[arg(long, value_delimiter = ',')]
    pub ops: Vec<String>,
    /// Leave nodes whose name contains this text untouched (repeatable).
    #[arg(long)]
    pub skip: Vec<String>,
    /// Store tensors of at least --external-threshold bytes in this file beside the output.
    #[arg(long)]
    pub external_data: Option<String>,
    /// Size threshold for --external-data, in bytes.
    #[arg(long, default_value_t = 1024)]
    pub external_threshold: usize,
    /// Also define each GatherMultiaxis as a model-local function whose body is its lowering
    /// (one overload per distinct lowering, IR version 10), so runtimes that inline local
    /// functions run the rewritten model as it is.
    #[arg(long)]
    pub with_function_body: bool,
    /// Prove the rewrite before writing it: run both models on random inputs drawn from the
    /// declared types and compare every output bit for bit (exit 1, nothing written, if they
    /// differ). For chosen inputs or symbolic dims, use `verify` on the output.
    #[arg(long)]
    pub verify: bool,
    /// Print a unified diff of the text form, before and after the rewrite, on standard
    /// output (stable across runs and platforms: fit for snapshot tests).
    #[arg(long)]
    pub diff: bool,
}

#[derive(clap::Args, Debug)]
pub struct LowerFlags {
    /// The model file.
    pub model: PathBuf,
    /// Where to write the lowered model (`-` for standard output).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Allow the output to be the input file.
    #[arg(long)]
    pub in_place: bool,
    /// The default-domain opset of the lowered model (default: the model's own). Fails when a
    /// GatherMultiaxis cannot be lowered there or another node would not mean the same there.
    #[arg(long, value_name = "N")]
    pub target_opset: Option<i64>,
}

#[derive(clap::Args, Debug)]
pub struct RunFlags {
    /// The model file.
    pub model: PathBuf,
    /// A directory of input_K.pb / NAME.pb / NAME.npy files.
    #[arg(long)]
    pub inputs: Option<PathBuf>,
    /// One input as NAME=FILE (.pb or .npy); repeatable.
    #[arg(long = "input")]
    pub input: Vec<String>,
    /// Write outputs as output_K.pb into this directory.
    #[arg(long)]
    pub output_dir: Option<PathBuf>,
    /// Run the graph this many times after loading, for timing.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Worker threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print timings and output shapes as JSON.
    #[arg(long)]
    pub json: bool,
    /// Memory budget for the tensors of a run, e.g. 8G, 512M or a byte count (default: the
    /// machine's physical memory).
    #[arg(long, value_parser = parse_size)]
    pub max_memory: Option<usize>,
    /// Time every node and print where the time went (per operator, then the slowest nodes)
    /// on stderr, or in the JSON with --json.
    #[arg(long)]
    pub profile: bool,
}

#[derive(clap::Args, Debug)]
pub struct VerifyFlags {
    /// The model file.
    pub model: PathBuf,
    /// Compare against this rewritten model instead of rewriting in memory.
    #[arg(long)]
    pub rewritten: Option<PathBuf>,
    /// A directory of inputs, as for `run`.
    #[arg(long)]
    pub inputs: Option<PathBuf>,
    /// One input as NAME=FILE (.pb or .npy), as for `run`; repeatable. Inputs not given
    /// are drawn.
    #[arg(long = "input")]
    pub input: Vec<String>,
    /// Draw the inputs not given (the default; accepted for scripts that pass it).
    #[arg(long)]
    pub random: bool,
    /// Seed of the drawn inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Size of a symbolic dimension of the drawn inputs, as NAME=VALUE; repeatable (default:
    /// what the graph requires, else 1, larger sizes searched if the model fails).
    #[arg(long)]
    pub dim: Vec<String>,
    /// Print the comparison as JSON.
    #[arg(long)]
    pub json: bool,
    /// Memory budget for the tensors of each run, as for `run`.
    #[arg(long, value_parser = parse_size)]
    pub max_memory: Option<usize>,
}

#[derive(clap::Args, Debug)]
pub struct TestFlags {
    /// Test directories, or directories of test directories.
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
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
