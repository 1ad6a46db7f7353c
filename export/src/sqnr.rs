//! Per-tensor SQNR: the fully simulated int8 graph (int8 weights, int32 biases and int8
//! activations, fake-quantized in the float executor) against the float one.

use crate::graph::Graph;
use crate::progress::Progress;
use crate::qmodel::QModel;
use crate::reference::{values, Executor, FakeQuant};
use crate::Result;

/// 10·log10(Σ f² / Σ (f − q)²) of every tensor over `pixels` (∞ where the two agree), the
/// reference from `float`, the simulation on its device; batches of at most 16 images (each
/// holds every tensor twice). `progress` hears of each batch.
pub fn sqnr_db(
    graph: &Graph,
    model: &QModel,
    float: &Executor,
    pixels: &[u8],
    batch: usize,
    progress: &dyn Progress,
) -> Result<Vec<f64>> {
    let nt = graph.tensors.len();
    let len = graph.tensors[graph.input].shape.len();
    let sim = Executor::on(
        graph,
        &FakeQuant {
            weights: Some(model.dequantized_weights(graph)),
            biases: Some(model.dequantized_biases()),
            activations: Some(model.qparams()),
        },
        float.device(),
    )?;
    progress.phase("SQNR per layer", pixels.len() / len);
    let mut signal = vec![0f64; nt];
    let mut noise = vec![0f64; nt];
    for chunk in pixels.chunks(batch.min(16) * len) {
        let m = chunk.len() / len;
        let mut reference: Vec<Option<Vec<f32>>> = vec![None; nt];
        float.run_batch(chunk, m, &mut |t, x| {
            reference[t] = Some(values(x)?);
            Ok(())
        })?;
        sim.run_batch(chunk, m, &mut |t, x| {
            if let Some(f) = &reference[t] {
                for (a, b) in f.iter().zip(values(x)?) {
                    signal[t] += (*a as f64).powi(2);
                    noise[t] += (*a as f64 - b as f64).powi(2);
                }
            }
            Ok(())
        })?;
        progress.advance(m);
    }
    Ok(signal
        .iter()
        .zip(&noise)
        .map(|(&s, &n)| {
            if n == 0.0 {
                f64::INFINITY
            } else {
                10.0 * (s / n).log10()
            }
        })
        .collect())
}
