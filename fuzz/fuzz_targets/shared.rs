//! What the fuzz targets that generate models share: the reader of the fuzz bytes, and the
//! check that a transformed model computes what the original did. Each target adds the reads
//! it needs to `Reader` in its own file.

use multigather::interp::{RunOptions, Session};
use multigather::ir::Model;
use multigather::text::model_to_text;
use multigather::Tensor;

/// Reads the fuzz bytes front to back; past the end every read is zero, so any input decodes.
pub struct Reader<'a>(pub &'a [u8]);

impl Reader<'_> {
    pub fn byte(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        b
    }

    /// A value in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n
    }
}

/// A model's outputs, by name.
pub type Outputs = Vec<(String, Tensor)>;

/// A session on `model` with `options` (threads, memory budget).
pub fn session<'m>(model: &'m Model, options: &RunOptions) -> Session<'m> {
    Session::with_options(model, options.clone())
}

/// Runs `model` on `feeds` (with `options`) and checks it computes `expected` exactly; on a difference, panics
/// showing the inputs, the original and the transformed model (all it takes to reproduce a
/// finding by hand).
pub fn check_same(
    original: &Model,
    model: &Model,
    stage: &str,
    feeds: &[(String, Tensor)],
    expected: &Outputs,
    options: &RunOptions,
) {
    let show = || {
        let (before, after) = (model_to_text(original), model_to_text(model));
        format!("inputs {feeds:?}\noriginal:\n{before}\n{stage}:\n{after}")
    };
    match session(model, options).run(feeds.to_vec()) {
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
