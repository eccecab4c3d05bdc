//! `multigather verify`: rewrites a model in memory (or takes a rewritten file), runs both on the
//! same inputs and compares every output bit for bit. A rewrite only moves data, so any
//! difference is a bug; exit 1 says so.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use multigather::interp::{RunOptions, Session};
use multigather::ir::Model;
use multigather::pass::{GatherToMultiaxis, RewriteConfig};
use multigather::tensor::{default_budget, Arena};
use multigather::verify::{compare, random_inputs, OutputComparison};
use multigather::Tensor;
use serde::Serialize;

use super::{output, Outcome};

/// Validated options of `multigather verify`.
pub struct VerifyArgs<'a> {
    pub model: &'a Path,
    pub rewritten: Option<&'a Path>,
    pub inputs: Option<&'a Path>,
    pub random: bool,
    pub seed: u64,
    pub dims: &'a [String],
    pub json: bool,
    pub max_memory: Option<usize>,
}

#[derive(Serialize)]
struct Report<'a> {
    identical: bool,
    rewritten_nodes: usize,
    outputs: &'a [OutputComparison],
}

/// Parses `--dim NAME=VALUE` pairs.
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

/// Runs `original` and `rewritten` on the same `inputs` and compares every output bit for bit.
pub fn prove(
    original: &Model,
    rewritten: &Model,
    inputs: &[(String, Tensor)],
    options: &RunOptions,
) -> Result<Vec<OutputComparison>> {
    let original = Session::with_options(original, options.clone());
    let rewritten = Session::with_options(rewritten, options.clone());
    // Both models are checked before either runs: an operator the interpreter lacks is
    // reported before any work is done.
    for (session, what) in [(&original, "original"), (&rewritten, "rewritten")] {
        session
            .check()
            .with_context(|| format!("running the {what} model"))?;
    }
    let run = |session: &Session, what: &str| {
        session
            .run(inputs.to_vec())
            .with_context(|| format!("running the {what} model"))
    };
    let expected = run(&original, "original")?;
    let actual = run(&rewritten, "rewritten")?;
    Ok(compare(&expected, &actual))
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

pub fn run(args: VerifyArgs) -> Result<Outcome> {
    let original = super::load(args.model)?;
    let (rewritten, rewritten_nodes) = match args.rewritten {
        Some(path) => (super::load(path)?, 0),
        None => {
            let mut m = original.clone();
            let report = GatherToMultiaxis::rewrite(&mut m, RewriteConfig::default())
                .with_context(|| format!("rewriting {}", args.model.display()))?;
            let count = report.rewritten;
            (m, count)
        }
    };
    let options = RunOptions {
        threads: None,
        max_memory: args.max_memory,
        ..RunOptions::default()
    };
    let budget = Arena::new(args.max_memory.unwrap_or_else(default_budget), false);
    let inputs = match (args.inputs, args.random) {
        (Some(_), true) => bail!("give either --inputs or --random, not both"),
        (Some(dir), false) => super::run::gather_inputs(&original, Some(dir), &[])?,
        (None, _) => {
            let dims = dim_sizes(args.dims)?;
            budget
                .enter(|| random_inputs(&original, args.seed, &dims))
                .context("drawing random inputs")?
        }
    };
    let comparisons = match prove(&original, &rewritten, &inputs, &options) {
        Err(e) if is_unsupported(&e) && args.rewritten.is_none() => {
            return Err(e.context(format!(
                "cannot prove the rewrite by running it ({rewritten_nodes} gathers rewritten and \
                 checked statically; `multigather rewrite` still writes it)"
            )))
        }
        other => other?,
    };
    let identical = comparisons.iter().all(|c| c.identical);
    if args.json {
        let report = Report {
            identical,
            rewritten_nodes,
            outputs: &comparisons,
        };
        output::println(&serde_json::to_string_pretty(&report)?)?;
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
        let verdict = if identical { "identical" } else { "DIFFERENT" };
        // What the original was compared with: the rewrite made here, or the file given.
        let against = match args.rewritten {
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
