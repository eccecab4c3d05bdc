//! What the fuzz targets that run models share: the check that a transformed model computes
//! what the original did.

use multigather::interp::{RunOptions, Session};
use multigather::ir::Model;
use multigather::text::model_to_text;
use multigather::Tensor;

/// A model's outputs, by name.
pub type Outputs = Vec<(String, Tensor)>;

/// A session with `threads` workers (`None`: every core; `Some(1)`: the calling thread only).
pub fn session(model: &Model, threads: Option<usize>) -> Session<'_> {
    let options = RunOptions {
        threads,
        max_memory: None,
    };
    Session::with_options(model, options)
}

/// Runs `model` on `feeds` (with `threads` workers) and checks it computes `expected` exactly; on a difference, panics
/// showing the inputs, the original and the transformed model (all it takes to reproduce a
/// finding by hand).
pub fn check_same(
    original: &Model,
    model: &Model,
    stage: &str,
    feeds: &[(String, Tensor)],
    expected: &Outputs,
    threads: Option<usize>,
) {
    let show = || {
        let (before, after) = (model_to_text(original), model_to_text(model));
        format!("inputs {feeds:?}\noriginal:\n{before}\n{stage}:\n{after}")
    };
    match session(model, threads).run(feeds.to_vec()) {
        Err(e) => panic!(
            "the {stage} model fails where the original ran: {e}\n{}",
            show()
        ),
        Ok(actual) if actual != *expected => panic!(
            "the {stage} model computes something else:\n{expected:?}\n{actual:?}\n{}",
            show()
        ),
        Ok(_) => {}
    }
}
