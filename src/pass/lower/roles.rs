//! The roles of a node's dimensions (axis, unit, input, index, batch; see the module
//! documentation of `lower`) and the pattern they choose.

use super::Pattern;
use crate::ir::{same_dim, Dim};

/// What one dimension is to the gather; see the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    Axis,
    Unit,
    Input,
    Index,
    Batch,
}

/// The roles of every dimension.
pub(super) fn roles(x: &[Dim], logical: &[Dim], axes: &[usize]) -> Vec<Role> {
    let one = |d: &Dim| d.known() == Some(1);
    x.iter()
        .zip(logical)
        .enumerate()
        .map(
            |(d, (xd, ld))| match (axes.contains(&d), one(xd), one(ld)) {
                (true, _, _) => Role::Axis,
                (false, true, true) => Role::Unit,
                (false, false, true) => Role::Input,
                (false, true, false) => Role::Index,
                (false, false, false) => Role::Batch,
            },
        )
        .collect()
}

/// The cheapest pattern for these roles that the standard operators of `opset` have.
///
/// One axis with batch dimensions and block (input or index) dimensions is a `GatherND` with
/// batch dimensions, which opset 11 lacks; there `GatherElements` does the same over operands
/// expanded to the output's shape (dearer: the indices are materialised at the output's size).
pub(super) fn choose(roles: &[Role], axis_count: usize, opset: i64) -> Pattern {
    let has = |r: Role| roles.contains(&r);
    match axis_count {
        0 => Pattern::Broadcast,
        1 if !has(Role::Batch) => Pattern::Blocks,
        1 if !has(Role::Input) && !has(Role::Index) => Pattern::Elements,
        1 if opset < 12 => Pattern::Elements,
        _ => Pattern::Nd,
    }
}

/// True unless every dimension of the input provably has its output size already (for
/// `axes = []`).
pub(super) fn grows(x: &[Dim], logical: &[Dim]) -> bool {
    x.iter()
        .zip(logical)
        .any(|(a, b)| !same_dim(a, b) && b.known() != Some(1))
}
