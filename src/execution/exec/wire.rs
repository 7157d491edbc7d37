//! The frames a serving worker and the audit exchange over pipes (`eval`: one warm session fed a
//! whole set, sample after sample, without a file per tensor). A frame is a kind byte and a
//! little-endian length-prefixed body; tensors travel as `.npy` bytes, named.
//!
//! ```text
//! request  (audit -> worker)  b'S' u64 count { u64 name_len name u64 npy_len npy }*
//! ready    (worker -> audit)  b'R' u64 json_len json           the session's JobResult so far
//! outputs  (worker -> audit)  b'O' f64 run_ms u64 count { u64 name_len name u64 npy_len npy }*
//! error    (worker -> audit)  b'E' u64 len text               this sample failed
//! ```
//!
//! The audit closes the worker's standard input to end it.

use std::io::{Read, Write};

use anyhow::{bail, Context, Result};

use crate::data::tensor::Tensor;

/// The longest tensor name a frame may carry.
const MAX_NAME: u64 = 64 << 10;
/// The most tensors one frame may carry.
const MAX_TENSORS: u64 = 1 << 16;
/// The largest `.npy` one frame may carry.
const MAX_NPY: u64 = 16 << 30;
/// The largest text (a result, an error) a frame may carry.
const MAX_TEXT: u64 = 256 << 20;

/// One frame, read.
#[derive(Debug)]
pub enum Frame {
    /// A sample to run.
    Request(Vec<(String, Tensor)>),
    /// The session is created: its `JobResult` so far, as JSON.
    Ready(Vec<u8>),
    /// A sample's outputs, in the session's output order, and how long the session took on it.
    Outputs {
        outputs: Vec<(String, Tensor)>,
        run_ms: f64,
    },
    /// A sample failed: the runtime's words.
    Error(String),
}

fn write_u64<W: Write>(w: &mut W, v: u64) -> std::io::Result<()> {
    w.write_all(&v.to_le_bytes())
}

fn read_u64<R: Read>(r: &mut R) -> Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b).context("a frame ends early")?;
    Ok(u64::from_le_bytes(b))
}

fn write_tensors<W: Write>(w: &mut W, tensors: &[(&str, &Tensor)]) -> Result<()> {
    write_u64(w, tensors.len() as u64)?;
    for (name, t) in tensors {
        write_u64(w, name.len() as u64)?;
        w.write_all(name.as_bytes())?;
        let npy = t.to_npy_bytes()?;
        write_u64(w, npy.len() as u64)?;
        w.write_all(&npy)?;
    }
    Ok(())
}

fn write_text<W: Write>(w: &mut W, kind: u8, text: &[u8]) -> Result<()> {
    w.write_all(&[kind])?;
    write_u64(w, text.len() as u64)?;
    w.write_all(text)?;
    Ok(())
}

/// Sends a sample to a worker.
pub fn write_request<W: Write>(w: &mut W, inputs: &[(String, Tensor)]) -> Result<()> {
    let named: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    w.write_all(b"S")?;
    write_tensors(w, &named)?;
    w.flush()?;
    Ok(())
}

/// Says the session is ready, with what is known of it.
pub fn write_ready<W: Write>(w: &mut W, result_json: &[u8]) -> Result<()> {
    write_text(w, b'R', result_json)?;
    w.flush()?;
    Ok(())
}

/// Answers a sample with its outputs and the session's time on it.
pub fn write_outputs<W: Write>(w: &mut W, outputs: &[(&str, &Tensor)], run_ms: f64) -> Result<()> {
    w.write_all(b"O")?;
    write_u64(w, run_ms.to_bits())?;
    write_tensors(w, outputs)?;
    w.flush()?;
    Ok(())
}

/// Answers a sample with the error it failed with.
pub fn write_error<W: Write>(w: &mut W, error: &str) -> Result<()> {
    write_text(w, b'E', error.as_bytes())?;
    w.flush()?;
    Ok(())
}

fn read_tensors<R: Read>(r: &mut R) -> Result<Vec<(String, Tensor)>> {
    let count = read_u64(r)?;
    if count > MAX_TENSORS {
        bail!("a frame claims {count} tensors");
    }
    let mut out = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let len = read_u64(r)?;
        if len > MAX_NAME {
            bail!("a frame claims a name of {len} bytes");
        }
        let mut name = vec![0u8; len as usize];
        r.read_exact(&mut name).context("a frame ends early")?;
        let name = String::from_utf8(name).context("a tensor name that is not UTF-8")?;
        let len = read_u64(r)?;
        if len > MAX_NPY {
            bail!("a frame claims a tensor of {len} bytes");
        }
        let mut body = r.by_ref().take(len);
        let t = Tensor::read_npy_from(&mut body).with_context(|| format!("tensor '{name}'"))?;
        if body.limit() != 0 {
            bail!("tensor '{name}': {} bytes after its data", body.limit());
        }
        out.push((name, t));
    }
    Ok(out)
}

fn read_text<R: Read>(r: &mut R) -> Result<Vec<u8>> {
    let len = read_u64(r)?;
    if len > MAX_TEXT {
        bail!("a frame claims {len} bytes of text");
    }
    let mut text = vec![0u8; len as usize];
    r.read_exact(&mut text).context("a frame ends early")?;
    Ok(text)
}

/// Reads the next frame; `None` at the end of the stream (between frames).
pub fn read_frame<R: Read>(r: &mut R) -> Result<Option<Frame>> {
    let mut kind = [0u8; 1];
    match r.read(&mut kind) {
        Ok(0) => return Ok(None),
        Ok(_) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(Some(match kind[0] {
        b'S' => Frame::Request(read_tensors(r)?),
        b'R' => Frame::Ready(read_text(r)?),
        b'O' => {
            let run_ms = f64::from_bits(read_u64(r)?);
            Frame::Outputs {
                outputs: read_tensors(r)?,
                run_ms,
            }
        }
        b'E' => Frame::Error(String::from_utf8_lossy(&read_text(r)?).into_owned()),
        other => bail!("a frame of unknown kind {other:#04x}"),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::tensor::TensorData;

    #[test]
    fn frames_round_trip_and_damaged_ones_are_refused() {
        let t = Tensor::new(vec![2], TensorData::Float32(vec![1.5, -2.0])).unwrap();
        let mut bytes = Vec::new();
        write_request(&mut bytes, &[("x".into(), t.clone())]).unwrap();
        write_ready(&mut bytes, b"{}").unwrap();
        write_outputs(&mut bytes, &[("y", &t)], 2.5).unwrap();
        write_error(&mut bytes, "no").unwrap();
        let mut r = bytes.as_slice();
        assert!(matches!(read_frame(&mut r).unwrap(), Some(Frame::Request(v)) if v[0].1 == t));
        assert!(matches!(read_frame(&mut r).unwrap(), Some(Frame::Ready(j)) if j == b"{}"));
        assert!(
            matches!(read_frame(&mut r).unwrap(), Some(Frame::Outputs { outputs, run_ms }) if outputs[0].0 == "y" && run_ms == 2.5)
        );
        assert!(matches!(read_frame(&mut r).unwrap(), Some(Frame::Error(e)) if e == "no"));
        assert!(read_frame(&mut r).unwrap().is_none());
        // Cut anywhere inside a frame, or a length that lies: an error, never a panic.
        for cut in 1..bytes.len() {
            let mut r = &bytes[..cut];
            while let Ok(Some(_)) = read_frame(&mut r) {}
        }
        let mut lie = vec![b'O'];
        lie.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(read_frame(&mut lie.as_slice()).is_err());
    }
}
