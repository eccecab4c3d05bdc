//! `multigather verify`: rewrites a model in memory (or takes a rewritten file), runs both on the
//! same inputs and compares every output bit for bit. A rewrite only moves data, so any
//! difference is a bug; exit 1 says so.
//!
//! Inputs not given (`--inputs DIR`, `--input NAME=FILE`) are drawn by the rules of
//! `multigather::verify::draw_inputs`; what was drawn, with which shapes and ranges, is printed.

use anyhow::{Context, Result};
use multigather::interp::{RunOptions, Session};
use multigather::ir::{Model, Value};
use multigather::pass::{GatherToMultiaxis, RewriteConfig};
use multigather::tensor::{default_budget, Arena};
use multigather::verify::{
    compare_fed, compare_values, dims_fed_apart, draw_runnable, prove_branches, Attempt, DimChoice,
    DrawOptions, Drawn, IfBranches, InputChoice, OutputComparison,
};
use serde::Serialize;

use super::options::Verify;
use super::{output, Outcome};

#[derive(Serialize)]
struct Report<'a> {
    identical: bool,
    rewritten_nodes: usize,
    inputs: &'a [InputChoice],
    dims: &'a [DimChoice],
    outputs: &'a [OutputComparison],
    /// The branches of each `If` of the main graph that ran, and on which inputs.
    branches: &'a [IfBranches],
}

/// Runs `original` and `rewritten` on the same inputs, given or drawn (see [`run_original`]),
/// and compares every output bit for bit.
pub fn prove(
    original: &Model,
    rewritten: &Model,
    draw: &DrawOptions,
    options: &RunOptions,
) -> Result<(Drawn, Vec<OutputComparison>, Vec<IfBranches>)> {
    let model = original;
    let original = Session::with_options(model, options.clone());
    let rewritten = Session::with_options(rewritten, options.clone());
    // Both models are checked before either runs: an operator the interpreter lacks is
    // reported before any work is done.
    for (session, what) in [(&original, "original"), (&rewritten, "rewritten")] {
        session
            .check()
            .with_context(|| format!("running the {what} model"))?;
    }
    let (drawn, expected) = run_original(model, &original, draw, options)?;
    let actual = rewritten
        .run_values(drawn.inputs.clone())
        .context("running the rewritten model")?;
    let mut comparisons = compare_values(&expected, &actual);
    // Feeds that give a shared symbolic dim different sizes: the rewrite must mean what the
    // original means there too, result or error (`verify::dims_fed_apart`).
    if let Some((apart, split)) = dims_fed_apart(&model.graph, &drawn.inputs) {
        let what = format!("with {} fed apart", split.join(", "));
        comparisons.extend(compare_fed(&original, &rewritten, apart, &what).unwrap_or_default());
    }
    // Draws that take the branches of the `If` nodes the first draw did not take.
    let branches = prove_branches(model, &original, &rewritten, &drawn.inputs);
    comparisons.extend(branches.differing);
    Ok((drawn, comparisons, branches.ifs))
}

/// Whether `e` says the interpreter lacks an operator (the rewrite may still be right; it
/// cannot be proved by running).
pub fn is_unsupported(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<multigather::Error>(),
            Some(multigather::Error::Unsupported(_))
        )
    })
}

/// Inputs the original model runs on, given or drawn (larger sizes searched when the first draw
/// fails), with the original's outputs. When no draw runs, the error names the drawn inputs
/// with their shapes and the `--dim` flags that would set them.
fn run_original(
    model: &Model,
    session: &Session,
    draw: &DrawOptions,
    options: &RunOptions,
) -> Result<(Drawn, Vec<(String, Value)>)> {
    // Drawn tensors count against the same budget as a run's.
    let budget = Arena::new(options.max_memory.unwrap_or_else(default_budget), false);
    let attempt = budget
        .enter(|| draw_runnable(model, draw, |inputs| session.run_values(inputs.to_vec())))
        .context("drawing random inputs")?;
    let (drawn, error, free, tried) = match attempt {
        Attempt::Ran { drawn, result, .. } => return Ok((drawn, result)),
        Attempt::Failed {
            drawn,
            error,
            free,
            tried,
        } => (drawn, error, free, tried),
    };
    let error = anyhow::Error::new(error);
    if drawn.choices.iter().all(|c| !c.drawn) {
        return Err(error.context("running the original model"));
    }
    let hint = failure_hint(&drawn, &free, &tried);
    Err(error.context(format!("running the original model {hint}")))
}

/// What was drawn when the original model failed on it, and what to give instead:
/// `on drawn inputs x float[1, 3, 1, 1] with h=1, w=1 (also tried h, w = 2, 4); give sizes with
/// --dim h=VALUE --dim w=VALUE or inputs with --input NAME=FILE`.
fn failure_hint(drawn: &Drawn, free: &[String], tried: &[usize]) -> String {
    let mut hint = format!("on drawn inputs {}", drawn.shapes());
    if !drawn.dims.is_empty() {
        let sizes: Vec<String> = drawn
            .dims
            .iter()
            .map(|d| format!("{}={}", d.name, d.size))
            .collect();
        hint += &format!(" with {}", sizes.join(", "));
    }
    if !tried.is_empty() {
        let sizes: Vec<String> = tried.iter().map(usize::to_string).collect();
        hint += &format!(" (also tried {} = {})", free.join(", "), sizes.join(", "));
    }
    let wanted: Vec<&str> = if free.is_empty() {
        drawn.dims.iter().map(|d| d.name.as_str()).collect()
    } else {
        free.iter().map(String::as_str).collect()
    };
    if wanted.is_empty() {
        hint += "; give inputs with --input NAME=FILE";
    } else {
        let flags: Vec<String> = wanted.iter().map(|n| format!("--dim {n}=VALUE")).collect();
        hint += &format!(
            "; give sizes with {} or inputs with --input NAME=FILE",
            flags.join(" ")
        );
    }
    hint
}

/// Rewrites the model (or loads the rewritten one), runs both and prints the comparison.
pub fn run(options: Verify) -> Result<Outcome> {
    let original = super::load(&options.model)?;
    let (rewritten, rewritten_nodes) = match &options.rewritten {
        Some(path) => (super::load(path)?, 0),
        None => {
            let mut m = original.clone();
            let report = GatherToMultiaxis::rewrite(&mut m, RewriteConfig::default())
                .with_context(|| format!("rewriting {}", options.model.display()))?;
            let count = report.rewritten;
            (m, count)
        }
    };
    let run = RunOptions {
        threads: None,
        max_memory: options.max_memory,
        ..RunOptions::default()
    };
    let draw = DrawOptions {
        seed: options.seed,
        dims: options.dims,
        given: super::run::read_inputs(&original, &options.inputs)?,
    };
    let (drawn, comparisons, branches) = match prove(&original, &rewritten, &draw, &run) {
        Err(e) if is_unsupported(&e) && options.rewritten.is_none() => {
            return Err(e.context(format!(
                "cannot prove the rewrite by running it ({rewritten_nodes} gathers rewritten and \
                 checked statically; `multigather rewrite` still writes it)"
            )))
        }
        other => other?,
    };
    let identical = comparisons.iter().all(|c| c.identical);
    if options.json {
        let report = Report {
            identical,
            rewritten_nodes,
            inputs: &drawn.choices,
            dims: &drawn.dims,
            outputs: &comparisons,
            branches: &branches,
        };
        output::println_json(&report, true)?;
    } else {
        output::println(&format!(
            "{:<32} {:<10} {:<18} {:>10} {:>12}",
            "output", "dtype", "shape", "mismatches", "max |diff|"
        ))?;
        for c in &comparisons {
            output::println(&format!(
                "{:<32} {:<10} {:<18} {:>10} {:>12}",
                c.name,
                c.dtype,
                format!("{:?}", c.shape),
                c.mismatches,
                c.max_abs_diff
                    .map_or_else(|| "-".into(), |d| format!("{d:e}")),
            ))?;
            if let Some(p) = &c.problem {
                output::println(&format!("  {p}"))?;
            }
        }
        if drawn.choices.iter().any(|c| c.drawn) {
            for line in drawn.lines() {
                output::eprintln(&line);
            }
        }
        for b in &branches {
            output::eprintln(&b.line());
        }
        let verdict = if identical { "identical" } else { "DIFFERENT" };
        // What the original was compared with: the rewrite made here, or the file given.
        let against = match &options.rewritten {
            Some(path) => format!("against {}", path.display()),
            None => format!("{rewritten_nodes} gathers rewritten"),
        };
        output::eprintln(&format!(
            "{verdict}: {} outputs compared bit for bit ({against})",
            comparisons.len()
        ));
    }
    Ok(if identical {
        Outcome::Success
    } else {
        Outcome::CheckFailed
    })
}
