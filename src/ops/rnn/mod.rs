//! PLACEHOLDER

use super::OpDef;

pub(super) const DEFS: &[OpDef] = &[];
