//! `multigather verify`: rewrites a model in memory (or takes a rewritten file), runs both on the
//! same inputs and compares every output bit for bit. A rewrite only moves data, so any
//! difference is a bug; exit 1 says so.
//!
//! The proof is the library's (`multigather::verify::prove`, `prove_rewrite`): this file only
//! prints it. Inputs not given (`--inputs DIR`, `--input NAME=FILE`) are drawn by the rules of
//! `multigather::verify::draw_inputs`; what was drawn, with which shapes and ranges, is printed.

use anyhow::{Context, Result};
use multigather::interp::RunOptions;
use multigather::verify::{prove, prove_rewrite, DrawOptions};

use super::options::Verify;
use super::{output, Outcome};

/// Rewrites the model (or loads the rewritten one), runs both and prints the comparison.
pub fn run(options: Verify) -> Result<Outcome> {
    let original = super::load(&options.model)?;
    let rewritten = options.rewritten.as_deref().map(super::load).transpose()?;
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
    let proof = match &rewritten {
        Some(rewritten) => prove(&original, rewritten, &draw, &run)?,
        None => match prove_rewrite(&original, &draw, &run) {
            Err(e @ multigather::Error::Proof { .. }) => return Err(e.into()),
            other => other.with_context(|| format!("rewriting {}", options.model.display()))?,
        },
    };
    let identical = proof.identical();
    if options.json {
        output::println_json(&proof, true)?;
    } else {
        output::println(&format!(
            "{:<32} {:<10} {:<18} {:>10} {:>12}",
            "output", "dtype", "shape", "mismatches", "max |diff|"
        ))?;
        for c in &proof.outputs {
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
        if proof.drew() {
            for line in proof.drawn.lines() {
                output::eprintln(&line);
            }
        }
        for b in &proof.branches {
            output::eprintln(&b.line());
        }
        let verdict = if identical { "identical" } else { "DIFFERENT" };
        // What the original was compared with: the rewrite made here, or the file given.
        let against = match &options.rewritten {
            Some(path) => format!("against {}", path.display()),
            None => format!("{} gathers rewritten", proof.rewritten_nodes),
        };
        output::eprintln(&format!(
            "{verdict}: {} outputs compared bit for bit ({against})",
            proof.outputs.len()
        ));
    }
    Ok(if identical {
        Outcome::Success
    } else {
        Outcome::CheckFailed
    })
}
