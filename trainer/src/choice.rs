//! Settings chosen by name on the command line and in checkpoints (`--bn sync`,
//! `--lr-scaling linear`, `--precision bf16`, `--schedule cosine`): each names its values once,
//! in one table with a line of help per value, and every such flag parses, prints, lists its
//! values in `--help` (with the `clap` feature) and words its error the same way.

/// One value of a choice: its names (the first is the one printed, the others are accepted
/// aliases) and the line `--help` shows beside it.
pub struct Named<T: 'static> {
    pub value: T,
    pub names: &'static [&'static str],
    pub help: &'static str,
}

/// `NAMED`, `name()`, `Display`, `FromStr` and (with the `clap` feature) `clap::ValueEnum` for
/// a fieldless enum from one table: `Variant => "name" | "alias": "help"`; case is ignored.
macro_rules! named_choice {
    ($ty:ident, $flag:literal, { $($variant:ident => $name:literal $(| $alias:literal)* : $help:literal),+ $(,)? }) => {
        impl $ty {
            /// Every value with its names and help, in the order `--help` lists them.
            pub const NAMED: &'static [$crate::choice::Named<$ty>] = &[$($crate::choice::Named {
                value: $ty::$variant,
                names: &[$name $(, $alias)*],
                help: $help,
            }),+];

            pub fn name(self) -> &'static str {
                match self {
                    $($ty::$variant => $name),+
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl std::str::FromStr for $ty {
            type Err = String;

            fn from_str(s: &str) -> std::result::Result<Self, String> {
                $crate::choice::parse(s, $flag, $ty::NAMED)
            }
        }

        $crate::choice::value_enum!($ty, [$($ty::$variant),+]);
    };
}
pub(crate) use named_choice;

/// `clap::ValueEnum` for `$ty` from its `NAMED` table (with the `clap` feature): `--help`
/// lists the names with their help, and clap refuses other values (exit code 2, with "a
/// similar value exists" for a near miss). `$variants` are the values clap returns.
macro_rules! value_enum {
    ($ty:ty, [$($variant:expr),+]) => {
        #[cfg(feature = "clap")]
        impl clap::ValueEnum for $ty {
            fn value_variants<'a>() -> &'a [Self] {
                &[$($variant),+]
            }

            fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
                $crate::choice::named(self, <$ty>::NAMED).map($crate::choice::possible_value)
            }
        }
    };
}
pub(crate) use value_enum;

/// The entry of `table` for `v`'s variant (its fields, if any, aside).
#[cfg(any(feature = "clap", test))]
pub(crate) fn named<T>(v: &T, table: &'static [Named<T>]) -> Option<&'static Named<T>> {
    let d = std::mem::discriminant(v);
    table.iter().find(|n| std::mem::discriminant(&n.value) == d)
}

/// What clap shows and accepts for one entry.
#[cfg(feature = "clap")]
pub(crate) fn possible_value<T>(n: &Named<T>) -> clap::builder::PossibleValue {
    clap::builder::PossibleValue::new(n.names[0])
        .aliases(n.names[1..].iter().copied())
        .help(n.help)
}

/// The value one of whose names is `s` (any case), or an error naming `flag`, `s` and the
/// values' first names.
pub(crate) fn parse<T: Copy>(s: &str, flag: &str, table: &[Named<T>]) -> Result<T, String> {
    let found = table
        .iter()
        .find(|n| n.names.iter().any(|name| name.eq_ignore_ascii_case(s)));
    match found {
        Some(n) => Ok(n.value),
        None => {
            let names: Vec<&str> = table.iter().map(|n| n.names[0]).collect();
            let expected = match names.split_last() {
                Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
                _ => names.join(""),
            };
            Err(format!("{flag} {s}: expected {expected}"))
        }
    }
}

#[cfg(test)]
mod tests {
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Fruit {
        Apple,
        Pear,
        Plum,
    }
    named_choice!(Fruit, "--fruit", {
        Apple => "apple" | "malus": "red or green",
        Pear => "pear": "pear-shaped",
        Plum => "plum": "a stone fruit",
    });

    #[test]
    fn names_aliases_case_and_the_error() {
        assert_eq!("apple".parse(), Ok(Fruit::Apple));
        assert_eq!("MALUS".parse(), Ok(Fruit::Apple));
        assert_eq!("Plum".parse(), Ok(Fruit::Plum));
        assert_eq!(Fruit::Pear.to_string(), "pear");
        assert_eq!(
            "fig".parse::<Fruit>(),
            Err::<Fruit, _>("--fruit fig: expected apple, pear or plum".into())
        );
        assert_eq!(
            super::named(&Fruit::Plum, Fruit::NAMED).unwrap().help,
            "a stone fruit"
        );
    }

    /// clap lists every name with its help, accepts the aliases in any case and refuses the
    /// rest.
    #[cfg(feature = "clap")]
    #[test]
    fn clap_sees_the_same_table() {
        use clap::ValueEnum;
        let pv = Fruit::Apple.to_possible_value().unwrap();
        assert_eq!(pv.get_name(), "apple");
        assert_eq!(pv.get_help().unwrap().to_string(), "red or green");
        assert_eq!(Fruit::from_str("Malus", true), Ok(Fruit::Apple));
        assert!(Fruit::from_str("fig", true).is_err());
        assert_eq!(Fruit::value_variants().len(), Fruit::NAMED.len());
    }
}
