//! In-memory image classification data: `u8` pixels, planar CHW per image.

use serde::{Deserialize, Serialize};

use super::{DataError, Result};

/// N images of C×H×W `u8` pixels (planar, CHW per image) and their labels.
#[derive(Clone, PartialEq, Eq)]
pub struct Dataset {
    pub images: Vec<u8>,
    pub labels: Vec<u8>,
    pub channels: usize,
    pub height: usize,
    pub width: usize,
    pub classes: usize,
}

impl Dataset {
    /// Builds a data set after checking it with [`Dataset::validate`].
    pub fn new(
        images: Vec<u8>,
        labels: Vec<u8>,
        channels: usize,
        height: usize,
        width: usize,
        classes: usize,
    ) -> Result<Self> {
        let dataset = Self {
            images,
            labels,
            channels,
            height,
            width,
            classes,
        };
        dataset.validate()?;
        Ok(dataset)
    }

    /// Checks that the pixel buffer holds exactly `len()` images of C×H×W and that
    /// every label is below `classes` (the fields are public, so anyone may break it).
    pub fn validate(&self) -> Result<()> {
        let (c, h, w) = (self.channels, self.height, self.width);
        let image_len = c
            .checked_mul(h)
            .and_then(|n| n.checked_mul(w))
            .ok_or_else(|| DataError::Invalid(format!("image shape {c}×{h}×{w} overflows")))?;
        let expected = image_len.checked_mul(self.len());
        if expected != Some(self.images.len()) {
            return Err(DataError::Invalid(format!(
                "{} labels of {c}×{h}×{w} images need {} pixel bytes, found {}",
                self.len(),
                expected.map_or_else(|| "more than usize::MAX".to_string(), |n| n.to_string()),
                self.images.len()
            )));
        }
        if let Some((index, &label)) = self
            .labels
            .iter()
            .enumerate()
            .find(|(_, &l)| usize::from(l) >= self.classes)
        {
            return Err(DataError::Invalid(format!(
                "label {label} of image {index} is not below the {} classes",
                self.classes
            )));
        }
        Ok(())
    }

    /// Number of images.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Bytes per image: C·H·W.
    pub fn image_len(&self) -> usize {
        self.channels * self.height * self.width
    }

    /// Pixels of image `i`. Panics if `i >= len()`, like slice indexing.
    pub fn image(&self, i: usize) -> &[u8] {
        let n = self.image_len();
        &self.images[i * n..(i + 1) * n]
    }

    /// Label of image `i`. Panics if `i >= len()`, like slice indexing.
    pub fn label(&self, i: usize) -> u8 {
        self.labels[i]
    }

    /// The images at `indices`, in that order (repeats allowed). Panics on an index
    /// `>= len()`, like slice indexing.
    pub fn subset(&self, indices: &[usize]) -> Dataset {
        let mut images = Vec::with_capacity(indices.len() * self.image_len());
        for &i in indices {
            images.extend_from_slice(self.image(i));
        }
        Dataset {
            images,
            labels: indices.iter().map(|&i| self.labels[i]).collect(),
            channels: self.channels,
            height: self.height,
            width: self.width,
            classes: self.classes,
        }
    }

    /// Images per class; labels outside `0..classes` are not counted.
    pub fn class_counts(&self) -> Vec<usize> {
        let mut counts = vec![0; self.classes];
        for &label in &self.labels {
            if let Some(c) = counts.get_mut(usize::from(label)) {
                *c += 1;
            }
        }
        counts
    }
}

// The pixel buffer is far too large to print; show the shape instead.
impl std::fmt::Debug for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dataset")
            .field("len", &self.len())
            .field("channels", &self.channels)
            .field("height", &self.height)
            .field("width", &self.width)
            .field("classes", &self.classes)
            .finish()
    }
}

/// Per-channel input normalisation, x' = (x/255 − mean) / std.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Normalization {
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
}

impl Normalization {
    /// The usual CIFAR-10 statistics of the lab recipe.
    pub fn cifar10() -> Self {
        Self {
            mean: vec![0.4914, 0.4822, 0.4465],
            std: vec![0.2023, 0.1994, 0.2010],
        }
    }

    /// Fashion-MNIST training-set statistics (one channel).
    pub fn fashion_mnist() -> Self {
        Self {
            mean: vec![0.2860],
            std: vec![0.3530],
        }
    }

    /// One finite mean and one finite, positive std per input channel; otherwise what is wrong
    /// (an empty, zero or NaN normalisation would give a model that sees nothing, or a shape
    /// error deep inside the first convolution).
    pub fn check(&self, channels: usize) -> std::result::Result<(), String> {
        if self.mean.len() != channels || self.std.len() != channels {
            return Err(format!(
                "normalisation has {} mean(s) and {} std(s) for a {channels}-channel model",
                self.mean.len(),
                self.std.len()
            ));
        }
        if let Some(m) = self.mean.iter().find(|m| !m.is_finite()) {
            return Err(format!(
                "normalisation mean {m} (of {:?}) is not a finite number",
                self.mean
            ));
        }
        if let Some(s) = self.std.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
            return Err(format!(
                "normalisation std {s} (of {:?}) must be a finite number above 0",
                self.std
            ));
        }
        Ok(())
    }
}

/// A train/test pair with the normalisation the model should use.
#[derive(Clone, Debug)]
pub struct DataSplit {
    /// "fashion-mnist", "fashion-mnist-subset", "cifar10" or "synthetic".
    pub name: String,
    pub train: Dataset,
    pub test: Dataset,
    pub norm: Normalization,
    /// Where the data came from, for the user: a directory, "bundled (DIR)" or
    /// "synthetic(seed=S)".
    pub origin: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Dataset {
        // Three 1×1×2 images with pixels (10·i, 10·i+1).
        Dataset::new(vec![0, 1, 10, 11, 20, 21], vec![2, 0, 2], 1, 1, 2, 3).unwrap()
    }

    #[test]
    fn accessors() {
        let d = tiny();
        assert_eq!(d.len(), 3);
        assert!(!d.is_empty());
        assert_eq!(d.image_len(), 2);
        assert_eq!(d.image(1), &[10, 11]);
        assert_eq!(d.label(2), 2);
        assert_eq!(d.class_counts(), vec![1, 0, 2]);
    }

    #[test]
    fn subset_keeps_order_and_shape() {
        let s = tiny().subset(&[2, 0, 2]);
        assert_eq!(s.images, vec![20, 21, 0, 1, 20, 21]);
        assert_eq!(s.labels, vec![2, 2, 2]);
        assert_eq!((s.channels, s.height, s.width, s.classes), (1, 1, 2, 3));
        assert!(tiny().subset(&[]).is_empty());
    }

    #[test]
    fn new_rejects_inconsistent_buffers() {
        assert!(Dataset::new(vec![0; 5], vec![0, 0, 0], 1, 1, 2, 3).is_err());
        assert!(Dataset::new(vec![0; 6], vec![0, 0, 3], 1, 1, 2, 3).is_err());
        assert!(Dataset::new(vec![], vec![0], usize::MAX, 2, 1, 3).is_err());
    }

    #[test]
    fn debug_shows_shape_not_pixels() {
        let s = format!("{:?}", tiny());
        assert!(s.contains("len: 3"), "{s}");
    }
}
