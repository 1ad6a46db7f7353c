//! Float checkpoint → int8 `.o8` model. Filled by the int8 issue; the workspace keeps its place.
