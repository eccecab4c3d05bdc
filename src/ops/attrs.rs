//! [`Attributes`] types that several operators share: one parser per attribute shape, so that
//! operators reading the same attributes read them the same way.

use crate::error::Result;
use crate::ir::Node;

use super::util::normalize_axis;
use super::Attributes;

/// An `axis` attribute, `DEFAULT` when absent; normalised by the rank where the inputs are known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Axis<const DEFAULT: i64>(pub i64);

impl<const DEFAULT: i64> Attributes for Axis<DEFAULT> {
    fn parse(node: &Node, _opset: i64) -> Result<Self> {
        Ok(Axis(node.attr_int("axis", DEFAULT)?))
    }
}

impl<const DEFAULT: i64> Axis<DEFAULT> {
    /// The axis among `rank` axes, made non-negative.
    pub(crate) fn of_rank(self, rank: usize) -> Result<usize> {
        normalize_axis(self.0, rank)
    }
}

/// An `axes` attribute as written (`None`: absent); normalised where the inputs are known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Axes(pub Option<Vec<i64>>);

impl Attributes for Axes {
    fn parse(node: &Node, _opset: i64) -> Result<Axes> {
        Ok(Axes(node.attr_ints("axes")?.map(<[i64]>::to_vec)))
    }
}

/// An `epsilon` attribute; `BITS` is the default's `f32` bit pattern (see [`Epsilon5`] and
/// [`Epsilon12`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Epsilon<const BITS: u32>(pub f32);

/// `epsilon`, 1e-5 when absent (the ONNX normalisations).
pub(crate) type Epsilon5 = Epsilon<{ 1e-5f32.to_bits() }>;

/// `epsilon`, 1e-12 when absent (onnxruntime's skip and embed layer normalisations).
pub(crate) type Epsilon12 = Epsilon<{ 1e-12f32.to_bits() }>;

impl<const BITS: u32> Attributes for Epsilon<BITS> {
    fn parse(node: &Node, _opset: i64) -> Result<Self> {
        Ok(Epsilon(node.attr_float("epsilon", f32::from_bits(BITS))?))
    }
}

/// An `alpha` attribute; `BITS` is the default's `f32` bit pattern (see [`Alpha1`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Alpha<const BITS: u32>(pub f32);

/// `alpha`, 1 when absent (`Elu`, `Celu`, `ThresholdedRelu`, `Swish`, `SwiGLU`).
pub(crate) type Alpha1 = Alpha<{ 1.0f32.to_bits() }>;

impl<const BITS: u32> Attributes for Alpha<BITS> {
    fn parse(node: &Node, _opset: i64) -> Result<Self> {
        Ok(Alpha(node.attr_float("alpha", f32::from_bits(BITS))?))
    }
}

/// `axis` (-1) and `epsilon` (1e-5) of a normalisation over the dims from `axis` on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TrailingNorm {
    pub axis: Axis<-1>,
    pub epsilon: Epsilon5,
}

impl Attributes for TrailingNorm {
    fn parse(node: &Node, opset: i64) -> Result<TrailingNorm> {
        Ok(TrailingNorm {
            axis: Axis::parse(node, opset)?,
            epsilon: Epsilon::parse(node, opset)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::AttrValue;

    #[test]
    fn defaults_apply_when_the_attribute_is_absent() {
        let bare = Node::new("LayerNormalization", "n", ["x"], ["y"]);
        assert_eq!(Axis::<-1>::parse(&bare, 17).unwrap(), Axis(-1));
        assert_eq!(Epsilon5::parse(&bare, 17).unwrap().0, 1e-5);
        assert_eq!(Epsilon12::parse(&bare, 1).unwrap().0, 1e-12);
        let set = bare
            .with_attr("axis", AttrValue::Int(2))
            .with_attr("epsilon", AttrValue::Float(0.5));
        assert_eq!(Axis::<-1>::parse(&set, 17).unwrap().of_rank(3).unwrap(), 2);
        assert_eq!(Epsilon12::parse(&set, 1).unwrap().0, 0.5);
    }

    #[test]
    fn a_mistyped_attribute_names_itself() {
        let node =
            Node::new("Gather", "g", ["x", "i"], ["y"]).with_attr("axis", AttrValue::Float(1.0));
        let err = Axis::<0>::parse(&node, 13).unwrap_err().to_string();
        assert!(err.contains("axis"), "{err}");
    }
}
