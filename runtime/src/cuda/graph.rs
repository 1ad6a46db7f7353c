//! CUDA graphs: the whole forward of a batch size captured once and replayed after, one
//! launch instead of one per op.

use cudarc::driver::{sys, CudaGraph};

use super::{CudaModel, Result};

/// Batch sizes whose captured forward graphs a model keeps.
const MAX_GRAPHS: usize = 8;

/// The captured forwards of one model, per batch size.
pub(super) type Graphs = Vec<(usize, CudaGraph)>;

impl CudaModel {
    /// Turns the replay of captured CUDA graphs on (the default) or off (every op launched
    /// one by one, as `profile` does); turning them off drops the captured graphs.
    pub fn set_cuda_graphs(&mut self, on: bool) {
        self.graphs = on.then(|| self.graphs.take().unwrap_or_default());
    }

    /// Drops the captured forwards (replay stays on): after a switch that changes what the
    /// forward launches (the conv kernels, fused adds), a graph captured before it would
    /// replay the old launches.
    pub(super) fn drop_graphs(&mut self) {
        if let Some(g) = self.graphs.as_mut() {
            g.clear();
        }
    }

    /// Queues the forward of `batch` images: the captured graph for this batch size, captured
    /// now if it is the first run at this size.
    pub(super) fn forward(&mut self, batch: usize) -> Result<()> {
        let Some(mut graphs) = self.graphs.take() else {
            return self.enqueue(batch, None);
        };
        let r = self.forward_graph(batch, &mut graphs);
        self.graphs = Some(graphs);
        r
    }

    fn forward_graph(&self, batch: usize, graphs: &mut Graphs) -> Result<()> {
        if let Some((_, g)) = graphs.iter().find(|(b, _)| *b == batch) {
            g.launch()?;
            return Ok(());
        }
        // Thread-local capture: other threads' CUDA calls (other models) are not affected.
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        self.stream.begin_capture(mode)?;
        let queued = self.enqueue(batch, None);
        let captured = self.stream.end_capture(sys::CUgraphInstantiate_flags(0));
        queued?;
        let Some(graph) = captured? else {
            // Nothing was captured (cannot happen: the forward launches at least one kernel).
            return self.enqueue(batch, None);
        };
        graph.launch()?;
        // A few sizes at most in practice; bound the cache anyway (each graph holds the
        // launch parameters of every op, a few KB).
        if graphs.len() >= MAX_GRAPHS {
            graphs.remove(0);
        }
        graphs.push((batch, graph));
        Ok(())
    }
}
