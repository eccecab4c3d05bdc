//! The four patterns: `Expand` (no axes), `Gather` (block dimensions only), `GatherElements`
//! (one axis over index dimensions) and `GatherND` (several axes), each built around the
//! operands' roles and finished by the mode adjustments of `modes`.

use super::roles::{grows, Role};
use super::{Lowerer, Tag, Val};
use crate::ir::{same_dim, AttrValue, Dim};
use crate::DataType;

impl Lowerer<'_, '_> {
    pub(super) fn rank(&self) -> usize {
        self.roles.len()
    }

    /// The dims of the operands / output that have one of these roles, in order.
    pub(super) fn dims_with(&self, roles: &[Role]) -> Vec<usize> {
        (0..self.rank())
            .filter(|&d| roles.contains(&self.roles[d]))
            .collect()
    }

    /// True when some batch dimension may differ between `a` and `b` (so `Expand` is needed).
    pub(super) fn batch_differs(&self, a: &[Dim], b: &[Dim]) -> bool {
        (0..self.rank()).any(|d| self.roles[d] == Role::Batch && !same_dim(&a[d], &b[d]))
    }

    /// `GatherMultiaxis(X, I, axes=[]) ==> Expand(X, Shape(I))`, or `X` itself when no
    /// dimension of `X` can grow.
    pub(super) fn broadcast(&mut self, x: &Val, i: &Val) -> Val {
        if !grows(&x.dims, self.logical) {
            return x.clone();
        }
        let shape = self.shape_of(i);
        // `Shape(I)` is computed at run time; the output's dims are `GatherMultiaxis`'s.
        let name = self.e.op_knowing(
            "Expand",
            &[&x.name, &shape],
            vec![],
            "expanded",
            Some(self.out_dims),
        );
        self.typed(name, x.elem)
    }

    /// One axis, no batch dimension: `Gather` on the input without its index dimensions, with
    /// the indices without their input and unit dimensions.
    pub(super) fn blocks(&mut self, x: &Val, i: &Val) -> Val {
        let axis = self.spec.axes[0];
        let (i, mask) = self.single_axis_modes(i);
        let drop_i = self.dims_with(&[Role::Input, Role::Unit]);
        let drop_x = self.dims_with(&[Role::Index]);
        let i_tags: Vec<usize> = (0..self.rank()).filter(|d| !drop_i.contains(d)).collect();
        let x_tags: Vec<usize> = (0..self.rank()).filter(|d| !drop_x.contains(d)).collect();
        let is = self.squeeze(&i, &drop_i, "indices");
        let xs = self.squeeze(x, &drop_x, "input");
        let pos = x_tags.iter().position(|&d| d == axis).unwrap_or_default();
        let tags: Vec<Tag> = x_tags[..pos]
            .iter()
            .chain(&i_tags)
            .chain(&x_tags[pos + 1..])
            .map(|&d| Tag::Dim(d))
            .collect();
        let name = self.e.op(
            "Gather",
            &[&xs.name, &is.name],
            vec![("axis", AttrValue::Int(pos as i64))],
            "gathered",
        );
        let gathered = self.typed(name, x.elem);
        let out = self.in_output_order(gathered, &tags);
        self.mask_output(out, mask)
    }

    /// One axis: `GatherElements` on both operands broadcast to the output's shape off the
    /// axis: the input over the batch and index dimensions, the indices over the batch and
    /// input dimensions (only batch dimensions exist unless the opset lacks `GatherND` with
    /// batch dimensions, see [`super::roles::choose`]).
    pub(super) fn elements(&mut self, x: &Val, i: &Val) -> Val {
        let axis = self.spec.axes[0];
        let (i, mask) = self.single_axis_modes(i);
        // Which dims of `v` take their size from the other operand; whether any may differ.
        let pick = |this: &Self, v: &[Dim], other: &[Dim], grow: Role| {
            let dims: Vec<Option<usize>> = (0..this.rank())
                .map(|d| (this.roles[d] == Role::Batch || this.roles[d] == grow).then_some(d))
                .collect();
            let differs = this.batch_differs(v, other) || this.roles.contains(&grow);
            (dims, differs)
        };
        let (x_dims, x_grows) = pick(self, &x.dims, self.logical, Role::Index);
        let xe = if x_grows {
            self.expand(x, &i, &x_dims, "input")
        } else {
            x.clone()
        };
        let (i_dims, i_grows) = pick(self, &i.dims, &x.dims, Role::Input);
        let ie = if i_grows {
            self.expand(&i, x, &i_dims, "indices")
        } else {
            i
        };
        let name = self.e.op(
            "GatherElements",
            &[&xe.name, &ie.name],
            vec![("axis", AttrValue::Int(axis as i64))],
            "gathered",
        );
        let out = self.typed(name, x.elem);
        self.mask_output(out, mask)
    }

    /// The general rule: `GatherND` with the batch dimensions first, the axes next and the
    /// input dimensions last in the data, and the batch dimensions first, the index and axis
    /// dimensions next and the coordinates last in the indices.
    pub(super) fn nd(&mut self, x: &Val, i: &Val) -> Val {
        let rank = self.rank();
        let k = self.spec.axes.len();
        let batch = self.dims_with(&[Role::Batch]);
        let input = self.dims_with(&[Role::Input, Role::Unit]);
        let index_or_axis = self.dims_with(&[Role::Index, Role::Axis]);

        // Indices: int64 tuples with the coordinates last.
        let mut t = self.cast_to_i64(i);
        let mut mask = None;
        if k == 1 {
            (t, mask) = self.modes(t);
        }
        let fold_free = self.roles[rank - 1] == Role::Input || self.roles[rank - 1] == Role::Unit;
        let mut t_tags: Vec<Tag> = (0..rank).map(Tag::Dim).collect();
        if fold_free {
            // The last dimension holds exactly one tuple: it is the coordinate dimension.
            t_tags[rank - 1] = Tag::Coord;
        } else {
            t = self.split(&t, k);
            t_tags.push(Tag::Coord);
        }
        let split = t.clone();
        if k > 1 {
            let (adjusted, ok) = self.modes(t);
            t = adjusted;
            mask = ok.map(|ok| self.all_coordinates(ok, fold_free));
        }

        // Data: without index dimensions; [batch, axes, input] with the axes in ascending
        // order if that needs no transpose, else in coordinate order.
        let drop_x = self.dims_with(&[Role::Index]);
        let x_tags: Vec<usize> = (0..rank).filter(|d| !drop_x.contains(d)).collect();
        let mut xd = self.squeeze(x, &drop_x, "input");
        let mut sorted_axes = self.spec.axes.clone();
        sorted_axes.sort_unstable();
        let natural: Vec<usize> = batch
            .iter()
            .chain(&sorted_axes)
            .chain(&input)
            .copied()
            .collect();
        let data_axes = if natural == x_tags {
            sorted_axes
        } else {
            self.spec.axes.clone()
        };
        if self.batch_differs(&x.dims, self.logical) {
            // The batch sizes of the logical indices are dims [0, rank) of the split tuples.
            let pick: Vec<Option<usize>> = x_tags
                .iter()
                .map(|&d| (self.roles[d] == Role::Batch).then_some(d))
                .collect();
            xd = self.expand(&xd, &split, &pick, "input");
        }
        let target: Vec<usize> = batch
            .iter()
            .chain(&data_axes)
            .chain(&input)
            .copied()
            .collect();
        let perm: Vec<usize> = target
            .iter()
            .map(|d| x_tags.iter().position(|t| t == d).unwrap_or_default())
            .collect();
        xd = self.transpose(xd, &perm, "input");

        // Coordinates in the data's axis order.
        if data_axes != self.spec.axes {
            let order: Vec<i64> = data_axes
                .iter()
                .map(|a| {
                    self.spec
                        .axes
                        .iter()
                        .position(|b| b == a)
                        .unwrap_or_default() as i64
                })
                .collect();
            let order = self.e.constant("coordinate_order", &order);
            let last = t.dims.len() as i64 - 1;
            let name = self.e.op(
                "Gather",
                &[&t.name, &order],
                vec![("axis", AttrValue::Int(last))],
                "coordinates",
            );
            t = self.typed(name, DataType::Int64);
        }
        // Without input dimensions, broadcast over the batch, [batch, index|axis, coordinates].
        let drop_t: Vec<usize> = (0..t_tags.len())
            .filter(|&j| matches!(t_tags[j], Tag::Dim(d) if input.contains(&d)))
            .collect();
        t = self.squeeze(&t, &drop_t, "indices");
        t_tags = t_tags
            .iter()
            .enumerate()
            .filter(|(j, _)| !drop_t.contains(j))
            .map(|(_, &tag)| tag)
            .collect();
        if self.batch_differs(self.logical, &x.dims) {
            let pick: Vec<Option<usize>> = t_tags
                .iter()
                .map(|tag| match tag {
                    Tag::Dim(d) if self.roles[*d] == Role::Batch => Some(*d),
                    _ => None,
                })
                .collect();
            t = self.expand(&t, x, &pick, "indices");
        }
        let t_target: Vec<Tag> = batch
            .iter()
            .chain(&index_or_axis)
            .map(|&d| Tag::Dim(d))
            .chain([Tag::Coord])
            .collect();
        let perm: Vec<usize> = t_target
            .iter()
            .map(|tag| t_tags.iter().position(|t| t == tag).unwrap_or_default())
            .collect();
        t = self.transpose(t, &perm, "indices");

        // The gather, then the output's own dimension order.
        let tags: Vec<Tag> = batch
            .iter()
            .chain(&index_or_axis)
            .chain(&input)
            .map(|&d| Tag::Dim(d))
            .collect();
        let mut attrs = Vec::new();
        if !batch.is_empty() {
            attrs.push(("batch_dims", AttrValue::Int(batch.len() as i64)));
        }
        let name = self
            .e
            .op("GatherND", &[&xd.name, &t.name], attrs, "gathered");
        let gathered = self.typed(name, x.elem);
        let out = self.in_output_order(gathered, &tags);
        self.mask_output(out, mask)
    }
}
