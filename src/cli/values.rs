//! Command-line values checked while clap parses: a bad value is clap's usage error (exit code
//! 2) naming what is accepted, with "a similar value exists" for a near miss. Fixed sets of
//! names are `clap::ValueEnum`s of the crates that define them (`clap` features); this file
//! holds the values with a parameter (`cuda:N`, `cifar10:DIR`, `percentile:P`) and numbers.

use std::ffi::OsStr;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::error::{Error, ErrorKind};
use octet_export::Calibration;
use octet_models::Model;
use octet_trainer::data::DataSource;
use octet_trainer::device::DeviceSpec;
use octet_trainer::TrainError;

/// A value of the form `KIND[:ARG]` checked by `parse`. An unknown KIND gets clap's
/// invalid-value error listing the kinds (and the nearest, for a near miss); a known KIND with
/// a bad ARG gets `parse`'s message, which names the accepted forms.
#[derive(Clone)]
pub struct Forms<T> {
    kinds: &'static [&'static str],
    parse: fn(&str) -> Result<T, String>,
}

impl<T> Forms<T> {
    /// `parse` for values whose part before any `:` is one of `kinds`.
    pub const fn new(kinds: &'static [&'static str], parse: fn(&str) -> Result<T, String>) -> Self {
        Self { kinds, parse }
    }
}

impl<T: Clone + Send + Sync + 'static> TypedValueParser for Forms<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<T, Error> {
        let s = value
            .to_str()
            .ok_or_else(|| Error::new(ErrorKind::InvalidUtf8).with_cmd(cmd))?;
        let why = match (self.parse)(s) {
            Ok(v) => return Ok(v),
            Err(why) => why,
        };
        let kind = s.split(':').next().unwrap_or(s);
        if !self.kinds.contains(&kind) {
            PossibleValuesParser::new(self.kinds).parse_ref(cmd, arg, OsStr::new(kind))?;
        }
        let name = arg.map(ToString::to_string).unwrap_or_default();
        let message = format!("invalid value '{s}' for '{name}': {why}\n");
        Err(Error::raw(ErrorKind::ValueValidation, message).with_cmd(cmd))
    }
}

/// `--model`: a built-in network's name (`NAME:WIDTH` for a width), or a `.toml`/`.json`
/// description, read and checked here (errors name the line and the layer). An unknown name
/// gets clap's invalid-value error: the built-in names and the nearest.
#[derive(Clone)]
pub struct ModelParser;

/// [`ModelParser`], as the `value_parser` attributes name it.
pub fn model() -> ModelParser {
    ModelParser
}

impl TypedValueParser for ModelParser {
    type Value = Model;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<Model, Error> {
        let s = value
            .to_str()
            .ok_or_else(|| Error::new(ErrorKind::InvalidUtf8).with_cmd(cmd))?;
        let why = match Model::parse(s) {
            Ok(m) => return Ok(m),
            Err(e) => e.to_string(),
        };
        let name = s.split(':').next().unwrap_or(s);
        if !Model::names_file(s) && name.parse::<octet_models::ModelKind>().is_err() {
            let names = octet_models::ModelKind::all().iter().map(|k| k.name());
            PossibleValuesParser::new(names).parse_ref(cmd, arg, OsStr::new(name))?;
        }
        let arg = arg.map(ToString::to_string).unwrap_or_default();
        let message = format!("invalid value '{s}' for '{arg}': {why}\n");
        Err(Error::raw(ErrorKind::ValueValidation, message).with_cmd(cmd))
    }
}

/// `--data`: the forms of [`DataSource`].
pub fn data() -> Forms<DataSource> {
    Forms {
        kinds: &DataSource::KINDS,
        parse: |s| {
            s.parse()
                .map_err(|e: octet_trainer::data::DataError| e.to_string())
        },
    }
}

/// `--device`: `cpu`, `cuda`, `cuda:N` (`gpu` = `cuda`) as a [`DeviceSpec`], checked but not
/// opened (that needs the GPU, after parsing: [`DeviceSpec::open`]).
pub fn device() -> Forms<DeviceSpec> {
    Forms::new(&["cpu", "cuda", "gpu"], parse_device_spec)
}

/// A [`DeviceSpec`], with the trainer's message for a bad one.
pub fn parse_device_spec(s: &str) -> Result<DeviceSpec, String> {
    s.parse().map_err(|e: TrainError| e.to_string())
}

/// What `--calibration` chose: one method, or each tried and the best kept.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CalibrationChoice {
    Method(Calibration),
    Best,
}

/// `--calibration`: minmax, percentile[:P] (50 < P ≤ 100), mse, entropy or best.
pub fn calibration() -> Forms<CalibrationChoice> {
    Forms {
        kinds: &["minmax", "percentile", "mse", "entropy", "best"],
        parse: |s| {
            Ok(CalibrationChoice::Method(match s {
                "best" => return Ok(CalibrationChoice::Best),
                "minmax" => Calibration::MinMax,
                "percentile" => Calibration::default(),
                "mse" => Calibration::Mse,
                "entropy" => Calibration::Entropy,
                _ => match s.strip_prefix("percentile:").map(str::parse::<f64>) {
                    Some(Ok(p)) if p > 50.0 && p <= 100.0 => Calibration::Percentile(p),
                    _ => {
                        return Err("expected minmax, percentile[:P] with 50 < P ≤ 100, mse, \
                                    entropy or best"
                            .into())
                    }
                },
            }))
        },
    }
}

/// A finite number above 0 (`--lr`, `--gamma`, `--bucket-mb`).
pub fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(v) => Err(format!("must be a finite number above 0, got {v}")),
        Err(e) => Err(e.to_string()),
    }
}

/// A finite number ≥ 0 (`--weight-decay`, `--warmup-epochs`, `--grace`).
pub fn non_negative(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        Ok(v) => Err(format!("must be a finite number ≥ 0, got {v}")),
        Err(e) => Err(e.to_string()),
    }
}

/// A number in [0, 1) (`--momentum`).
pub fn below_one(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..1.0).contains(&v) => Ok(v),
        Ok(v) => Err(format!("must be in [0, 1), got {v}")),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse<T: Clone + Send + Sync + 'static>(f: Forms<T>, s: &str) -> Result<T, Error> {
        f.parse_ref(&clap::Command::new("t"), None, OsStr::new(s))
    }

    #[test]
    fn forms_accept_parameters_and_refuse_with_usage_errors() {
        assert_eq!(parse(device(), "cuda:3").unwrap().to_string(), "cuda:3");
        assert_eq!(parse(device(), "cpu").unwrap().to_string(), "cpu");
        assert_eq!(
            parse(calibration(), "percentile:99.9").unwrap(),
            CalibrationChoice::Method(Calibration::Percentile(99.9))
        );
        assert_eq!(
            parse(calibration(), "best").unwrap(),
            CalibrationChoice::Best
        );
        assert_eq!(
            parse(data(), "synthetic:64:8").unwrap(),
            "synthetic:64:8".parse::<DataSource>().unwrap()
        );
        // An unknown kind: clap's list of values; a known kind with a bad parameter: the forms.
        let e = parse(device(), "cuda:x").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ValueValidation);
        assert!(e.to_string().contains("cuda:N"), "{e}");
        let e = parse(device(), "tpu").unwrap_err();
        assert_eq!((e.kind(), e.exit_code()), (ErrorKind::InvalidValue, 2));
        let e = parse(calibration(), "percentile:20").unwrap_err();
        assert!(e.to_string().contains("50 < P ≤ 100"), "{e}");
        assert_eq!(e.exit_code(), 2);
        let e = parse(data(), "cifar10:").unwrap_err();
        assert!(e.to_string().contains("cifar10:DIR"), "{e}");
    }

    #[test]
    fn numbers_refuse_out_of_range() {
        assert_eq!(positive("0.1"), Ok(0.1));
        for bad in ["0", "-1", "inf", "nan", "x"] {
            assert!(positive(bad).is_err(), "{bad}");
        }
        assert_eq!(non_negative("0"), Ok(0.0));
        assert!(non_negative("-0.5").is_err() && non_negative("inf").is_err());
        assert_eq!(below_one("0.9"), Ok(0.9));
        assert!(below_one("1").is_err() && below_one("-0.1").is_err());
    }
}
