//! `multigather rewrite`: the GatherToMultiaxis pass from file to file.

use anyhow::{Context, Result};
use multigather::interp::RunOptions;
use multigather::pass::{DefineMultiaxisFunctions, GatherToMultiaxis};
use multigather::verify::{prove, DrawOptions};

use super::options::{Rewrite, RewriteStdout};
use super::{output, Outcome};

/// Rewrites, proves if asked, and saves the model; prints the report and what `options.stdout`
/// asks for.
pub fn run(options: Rewrite) -> Result<Outcome> {
    let diff = options.stdout == RewriteStdout::Diff;
    let mut model = super::load(&options.model)?;
    let original = (options.verify || diff).then(|| model.clone());
    let report = GatherToMultiaxis::rewrite(&mut model, options.config)
        .with_context(|| format!("rewriting {}", options.model.display()))?;
    if let Some(original) = original.as_ref().filter(|_| options.verify) {
        let proved = prove(
            original,
            &model,
            &DrawOptions::default(),
            &RunOptions::default(),
        );
        let comparisons = match proved {
            // The interpreter lacks an operator: the rewrite is written, checked statically
            // only, and the message says so.
            Err(e) if e.is_unsupported() => {
                output::eprintln(&format!(
                    "not verified by running ({e:#}); the rewrite is written, checked \
                     statically only"
                ));
                None
            }
            other => Some(
                other
                    .context(
                        "verifying the rewrite (`multigather verify` takes --dim and --input)",
                    )?
                    .outputs,
            ),
        };
        let proved = comparisons.is_some();
        let comparisons = comparisons.unwrap_or_default();
        let different: Vec<&str> = comparisons
            .iter()
            .filter(|c| !c.identical)
            .map(|c| c.name.as_str())
            .collect();
        if !different.is_empty() {
            output::eprintln(&format!(
                "DIFFERENT: the rewritten model differs on {}; nothing was written",
                different.join(", ")
            ));
            return Ok(Outcome::CheckFailed);
        }
        if proved {
            output::eprintln(&format!(
                "verified: {} outputs identical bit for bit on random inputs",
                comparisons.len()
            ));
        }
    }
    // The diff of the rewrite itself, before any function bodies are defined; printed once the
    // model is saved.
    let diff = match (&original, diff) {
        (Some(original), true) => Some(multigather::text::model_diff(original, &model)),
        _ => None,
    };
    let functions = if options.with_function_body {
        let report = DefineMultiaxisFunctions::define(&mut model)
            .with_context(|| format!("defining functions in {}", options.model.display()))?;
        Some(report)
    } else {
        None
    };
    super::save(&model, &options.output, &options.save)?;
    output::eprintln(&report.summary());
    if let Some(functions) = &functions {
        output::eprintln(&functions.summary());
    }
    if options.stdout == RewriteStdout::Report {
        output::println_json(&report, true)?;
    }
    if let Some(diff) = &diff {
        output::print(diff)?;
    }
    Ok(Outcome::Success)
}
