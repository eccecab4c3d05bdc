//! The layout family: operators that move, select, repeat or generate elements rather than
//! compute with them — shapes and reshapes, transposes, concatenation and splitting, slices,
//! broadcasts and tiles, pads, scatters, index generators, triangles, resizes and inference-mode
//! dropout.
//!
//! Design note: nearly every kernel here is one call of [`runs::gather_axes`] (each output
//! axis reads a list of input positions) or a few runs of [`runs::Writer`] (copy or repeat
//! element runs from several tensors). Both move elements without looking at them, so every
//! element type works — strings, complex and packed sub-byte types included — without per-type
//! code. Only the operators that compute values (`Range`, linear and cubic `Resize`, scatter
//! reductions) dispatch over numeric types.
//!
//! Each operator has one line in [`DEFS`]; a second line with `.until(v)` marks an opset where
//! its inputs or attributes changed meaning.

mod center_crop_pad;
mod concat_split;
mod constant;
mod depth_space;
mod dropout;
mod expand_tile;
mod nonzero;
mod onehot;
mod pad;
mod range;
mod reshape;
mod resize;
mod reverse_sequence;
mod runs;
mod scatter;
mod shape;
mod slice;
mod tensor_scatter;
mod transpose;
mod trilu;
mod unique;

use super::attrs::{Axes, Axis};
use super::{prepare, OpDef};

pub(super) use concat_split::{concat, split};

const ANY: usize = usize::MAX;

pub(super) const DEFS: &[OpDef] = &[
    OpDef::new("Shape", 1, 1..=1, 1..=1, shape::eval_shape).with_infer(shape::infer_shape),
    OpDef::new("Size", 1, 1..=1, 1..=1, shape::eval_size).with_infer(shape::infer_size),
    OpDef::new("Reshape", 1, 1..=1, 1..=1, reshape::eval_reshape)
        .with_infer(reshape::infer_reshape)
        .with_prepare(prepare::<reshape::ReshapeAttrs>)
        .until(4),
    OpDef::new("Reshape", 5, 2..=2, 1..=1, reshape::eval_reshape)
        .with_infer(reshape::infer_reshape)
        .with_prepare(prepare::<reshape::ReshapeAttrs>),
    OpDef::new("Flatten", 1, 1..=1, 1..=1, reshape::eval_flatten)
        .with_infer(reshape::infer_flatten)
        .with_prepare(prepare::<Axis<1>>),
    // The `axes` attribute is read before opset 13 only.
    OpDef::new("Squeeze", 1, 1..=1, 1..=1, reshape::eval_squeeze)
        .with_infer(reshape::infer_squeeze)
        .with_prepare(prepare::<Axes>)
        .until(12),
    OpDef::new("Squeeze", 13, 1..=2, 1..=1, reshape::eval_squeeze)
        .with_infer(reshape::infer_squeeze),
    OpDef::new("Unsqueeze", 1, 1..=1, 1..=1, reshape::eval_unsqueeze)
        .with_infer(reshape::infer_unsqueeze)
        .with_prepare(prepare::<Axes>)
        .until(12),
    OpDef::new("Unsqueeze", 13, 2..=2, 1..=1, reshape::eval_unsqueeze)
        .with_infer(reshape::infer_unsqueeze),
    OpDef::new("Transpose", 1, 1..=1, 1..=1, transpose::eval_transpose)
        .with_infer(transpose::infer_transpose)
        .with_prepare(prepare::<transpose::Perm>),
    OpDef::new("Concat", 1, 1..=ANY, 1..=1, concat_split::eval_concat)
        .with_infer(concat_split::infer_concat)
        .with_prepare(prepare::<concat_split::ConcatAxis>),
    OpDef::new("Split", 1, 1..=2, 1..=ANY, concat_split::eval_split)
        .with_infer(concat_split::infer_split)
        .with_prepare(prepare::<concat_split::SplitAttrs>)
        .until(12),
    OpDef::new("Split", 13, 1..=2, 1..=ANY, concat_split::eval_split)
        .with_infer(concat_split::infer_split)
        .with_prepare(prepare::<concat_split::SplitAttrs>),
    OpDef::new("Slice", 1, 1..=1, 1..=1, slice::eval_slice)
        .with_infer(slice::infer_slice)
        .with_prepare(prepare::<slice::SliceAttrs>)
        .until(9),
    OpDef::new("Slice", 10, 3..=5, 1..=1, slice::eval_slice).with_infer(slice::infer_slice),
    OpDef::new("Compress", 9, 2..=2, 1..=1, slice::eval_compress).with_infer(slice::infer_compress),
    OpDef::new("Expand", 8, 2..=2, 1..=1, expand_tile::eval_expand)
        .with_infer(expand_tile::infer_expand),
    OpDef::new("Tile", 1, 3..=3, 1..=1, expand_tile::eval_tile)
        .with_infer(expand_tile::infer_tile)
        .until(5),
    OpDef::new("Tile", 6, 2..=2, 1..=1, expand_tile::eval_tile).with_infer(expand_tile::infer_tile),
    OpDef::new("Pad", 1, 1..=1, 1..=1, pad::eval_pad)
        .with_prepare(prepare::<pad::PadAttrs>)
        .with_infer(pad::infer_pad)
        .until(10),
    OpDef::new("Pad", 11, 2..=4, 1..=1, pad::eval_pad)
        .with_infer(pad::infer_pad)
        .with_prepare(prepare::<pad::PadAttrs>),
    OpDef::new("Unique", 11, 1..=1, 1..=4, unique::eval_unique).with_infer(unique::infer_unique),
    OpDef::new(
        "CenterCropPad",
        18,
        2..=2,
        1..=1,
        center_crop_pad::eval_center_crop_pad,
    )
    .with_infer(center_crop_pad::infer_center_crop_pad),
    OpDef::new(
        "TensorScatter",
        24,
        2..=3,
        1..=1,
        tensor_scatter::eval_tensor_scatter,
    )
    .with_infer(tensor_scatter::infer_tensor_scatter),
    OpDef::new(
        "ConstantOfShape",
        9,
        1..=1,
        1..=1,
        constant::eval_constant_of_shape,
    )
    .with_infer(constant::infer_constant_of_shape),
    OpDef::new("EyeLike", 9, 1..=1, 1..=1, constant::eval_eye_like)
        .with_infer(constant::infer_eye_like),
    OpDef::new("Range", 11, 3..=3, 1..=1, range::eval_range).with_infer(range::infer_range),
    OpDef::new("NonZero", 9, 1..=1, 1..=1, nonzero::eval_nonzero)
        .with_infer(nonzero::infer_nonzero),
    OpDef::new("OneHot", 9, 3..=3, 1..=1, onehot::eval_one_hot).with_infer(onehot::infer_one_hot),
    OpDef::new(
        "ScatterElements",
        11,
        3..=3,
        1..=1,
        scatter::eval_scatter_elements,
    )
    .with_infer(scatter::infer_scatter),
    OpDef::new("ScatterND", 11, 3..=3, 1..=1, scatter::eval_scatter_nd)
        .with_infer(scatter::infer_scatter),
    OpDef::new("Scatter", 9, 3..=3, 1..=1, scatter::eval_scatter_elements)
        .with_infer(scatter::infer_scatter),
    OpDef::new(
        "DepthToSpace",
        1,
        1..=1,
        1..=1,
        depth_space::eval_depth_to_space,
    )
    .with_infer(depth_space::infer_depth_to_space)
    .with_prepare(prepare::<depth_space::Blocks>),
    OpDef::new(
        "SpaceToDepth",
        1,
        1..=1,
        1..=1,
        depth_space::eval_space_to_depth,
    )
    .with_infer(depth_space::infer_space_to_depth)
    .with_prepare(prepare::<depth_space::Blocks>),
    OpDef::new("Trilu", 14, 1..=2, 1..=1, trilu::eval_trilu).with_infer(trilu::infer_trilu),
    OpDef::new(
        "ReverseSequence",
        10,
        2..=2,
        1..=1,
        reverse_sequence::eval_reverse_sequence,
    )
    .with_infer(reverse_sequence::infer_reverse_sequence),
    OpDef::new("Dropout", 1, 1..=1, 1..=2, dropout::eval_dropout)
        .with_infer(dropout::infer_dropout)
        .until(11),
    OpDef::new("Dropout", 12, 1..=3, 1..=2, dropout::eval_dropout)
        .with_infer(dropout::infer_dropout),
    OpDef::new("Resize", 10, 2..=2, 1..=1, resize::eval_resize_10)
        .with_infer(resize::infer_resize)
        .with_prepare(prepare::<resize::LegacyParams>)
        .until(10),
    OpDef::new("Resize", 11, 1..=4, 1..=1, resize::eval_resize)
        .with_infer(resize::infer_resize)
        .with_prepare(prepare::<resize::ResizeAttrs>),
    OpDef::new("Upsample", 1, 1..=1, 1..=1, resize::eval_upsample)
        .with_infer(resize::infer_upsample)
        .with_prepare(prepare::<resize::LegacyParams>)
        .until(8),
    OpDef::new("Upsample", 9, 2..=2, 1..=1, resize::eval_upsample)
        .with_infer(resize::infer_upsample)
        .with_prepare(prepare::<resize::LegacyParams>),
];
