use candle_core::Shape;

/// Errors of model construction and weight loading. Each names the tensor at fault.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("unknown model '{0}': expected one of {names}", names = crate::ModelKind::all().iter().map(|k| k.name()).collect::<Vec<_>>().join(", "))]
    UnknownModel(String),
    #[error("network description: {0}")]
    Spec(#[from] crate::spec::SpecError),
    #[error("tensor '{name}' is missing from the checkpoint")]
    MissingTensor { name: String },
    #[error(
        "tensor '{name}' has shape {found:?} in the checkpoint, the model expects {expected:?}"
    )]
    ShapeMismatch {
        name: String,
        expected: Shape,
        found: Shape,
    },
    #[error("tensor '{name}': {source}")]
    Tensor {
        name: String,
        source: candle_core::Error,
    },
    #[error(
        "{0:?} activations need a CUDA device: candle has no {0:?} matrix multiply on the CPU \
         (use --precision f32 there, or --device cuda)"
    )]
    DtypeNeedsCuda(candle_core::DType),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

pub type Result<T> = std::result::Result<T, ModelError>;
