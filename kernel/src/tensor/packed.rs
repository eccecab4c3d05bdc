//! Bit-level access to packed sub-byte elements (2, 4 and 6 bits wide).
//!
//! ONNX packs sub-byte elements little-endian: element `i` occupies bits `[i * bits, (i + 1) *
//! bits)` of the byte stream, counting from the least significant bit of byte 0. A 6-bit element
//! may straddle two bytes. These helpers read and write one element at a time; they are what the
//! reference kernel uses, and the fast kernel's packed path is built on [`read`] and [`BitWriter`].

/// The value of element `i` of a packed stream of `bits`-wide elements, in the low bits.
///
/// Returns `None` when the element does not lie inside `bytes`.
///
/// # Example
/// ```
/// use multigather_kernel::tensor::packed;
/// // Two 4-bit elements per byte, first in the low nibble.
/// assert_eq!(packed::read(&[0x21, 0x43], 4, 2), Some(3));
/// ```
pub fn read(bytes: &[u8], bits: usize, i: usize) -> Option<u8> {
    let start = i.checked_mul(bits)?;
    let byte = start / 8;
    let shift = start % 8;
    let lo = u16::from(*bytes.get(byte)?);
    let hi = if shift + bits > 8 {
        u16::from(*bytes.get(byte + 1)?)
    } else {
        0
    };
    let word = lo | (hi << 8);
    Some(((word >> shift) & mask(bits)) as u8)
}

/// Overwrites element `i` of a packed stream with the low `bits` bits of `value`.
///
/// Returns `None` (and writes nothing) when the element does not lie inside `bytes`.
pub fn write(bytes: &mut [u8], bits: usize, i: usize, value: u8) -> Option<()> {
    let start = i.checked_mul(bits)?;
    let byte = start / 8;
    let shift = start % 8;
    let straddles = shift + bits > 8;
    if byte >= bytes.len() || (straddles && byte + 1 >= bytes.len()) {
        return None;
    }
    let m = mask(bits) << shift;
    let v = (u16::from(value) & mask(bits)) << shift;
    bytes[byte] = (bytes[byte] & !(m as u8)) | v as u8;
    if straddles {
        let (m_hi, v_hi) = ((m >> 8) as u8, (v >> 8) as u8);
        bytes[byte + 1] = (bytes[byte + 1] & !m_hi) | v_hi;
    }
    Some(())
}

/// Mask of the padding bits in the last byte of a packed stream of `count` elements, or 0 when
/// the last byte is full (or the stream is empty).
pub fn padding_mask(bits: usize, count: usize) -> u8 {
    match (count * bits) % 8 {
        0 => 0,
        used => !((1u16 << used) - 1) as u8,
    }
}

fn mask(bits: usize) -> u16 {
    (1u16 << bits) - 1
}

/// Appends packed elements to a byte buffer front to back, writing whole bytes only.
///
/// The fast kernel writes its output in order, so packing through an accumulator lets it write
/// an uninitialised buffer without ever reading it. [`BitWriter::finish`] flushes a partial last
/// byte with zero padding bits.
pub struct BitWriter<'a> {
    out: &'a mut [std::mem::MaybeUninit<u8>],
    next: usize,
    acc: u32,
    filled: usize,
    bits: usize,
}

impl<'a> BitWriter<'a> {
    /// A writer of `bits`-wide elements into `out`, starting at its first byte.
    pub fn new(out: &'a mut [std::mem::MaybeUninit<u8>], bits: usize) -> Self {
        BitWriter {
            out,
            next: 0,
            acc: 0,
            filled: 0,
            bits,
        }
    }

    /// Appends one element (the low `bits` bits of `value`).
    ///
    /// Elements past the end of the buffer are dropped; the caller sizes the buffer exactly.
    #[inline]
    pub fn push(&mut self, value: u8) {
        self.acc |= (u32::from(value) & u32::from(mask(self.bits))) << self.filled;
        self.filled += self.bits;
        while self.filled >= 8 {
            if let Some(slot) = self.out.get_mut(self.next) {
                slot.write(self.acc as u8);
            }
            self.next += 1;
            self.acc >>= 8;
            self.filled -= 8;
        }
    }

    /// Flushes a partial last byte (padding bits zero) and returns the number of bytes written.
    pub fn finish(mut self) -> usize {
        if self.filled > 0 {
            if let Some(slot) = self.out.get_mut(self.next) {
                slot.write(self.acc as u8);
            }
            self.next += 1;
        }
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::MaybeUninit;

    #[test]
    fn six_bit_elements_straddle_bytes() {
        let mut bytes = [0u8; 3];
        for (i, v) in [0x3f, 0x01, 0x2a, 0x15].into_iter().enumerate() {
            write(&mut bytes, 6, i, v).unwrap();
        }
        let read_back: Vec<u8> = (0..4).map(|i| read(&bytes, 6, i).unwrap()).collect();
        assert_eq!(read_back, [0x3f, 0x01, 0x2a, 0x15]);
        assert_eq!(read(&bytes, 6, 4), None);
        assert_eq!(write(&mut bytes, 6, 4, 0), None);
    }

    #[test]
    fn bit_writer_matches_write() {
        for bits in [2usize, 4, 6] {
            let values: Vec<u8> = (0..13u8).map(|i| i.wrapping_mul(37) ^ 0x55).collect();
            let nbytes = (values.len() * bits).div_ceil(8);
            let mut expected = vec![0u8; nbytes];
            for (i, v) in values.iter().enumerate() {
                write(&mut expected, bits, i, *v).unwrap();
            }
            let mut buf = vec![MaybeUninit::<u8>::uninit(); nbytes];
            let mut w = BitWriter::new(&mut buf, bits);
            for v in &values {
                w.push(*v);
            }
            assert_eq!(w.finish(), nbytes);
            let got: Vec<u8> = buf
                .iter()
                // SAFETY: `finish` returned `nbytes`, the length of `buf`: the writer
                // initialised every byte of it.
                .map(|b| unsafe { b.assume_init() })
                .collect();
            assert_eq!(got, expected, "bits {bits}");
            assert_eq!(got[nbytes - 1] & padding_mask(bits, values.len()), 0);
        }
    }
}
