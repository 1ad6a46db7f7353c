//! Settings chosen by name on the command line and in checkpoints (`--bn sync`,
//! `--lr-scaling linear`, `--precision bf16`): each names its values once, in one table, and
//! every such flag parses, prints and words its error the same way.

/// `name()`, `Display` and `FromStr` for a fieldless enum from one table of names: the first
/// name of each variant is the one printed, the others are accepted aliases; case is ignored.
macro_rules! named_choice {
    ($ty:ident, $flag:literal, { $($variant:ident => $name:literal $(| $alias:literal)*),+ $(,)? }) => {
        impl $ty {
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
                $crate::choice::parse(s, $flag, &[$(($ty::$variant, &[$name $(, $alias)*])),+])
            }
        }
    };
}
pub(crate) use named_choice;

/// The value one of whose names is `s` (any case), or an error naming `flag`, `s` and the
/// values' first names.
pub(crate) fn parse<T: Copy>(s: &str, flag: &str, table: &[(T, &[&str])]) -> Result<T, String> {
    let found = table
        .iter()
        .find(|(_, names)| names.iter().any(|n| n.eq_ignore_ascii_case(s)));
    match found {
        Some((value, _)) => Ok(*value),
        None => {
            let names: Vec<&str> = table.iter().map(|(_, names)| names[0]).collect();
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
    named_choice!(Fruit, "--fruit", { Apple => "apple" | "malus", Pear => "pear", Plum => "plum" });

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
    }
}
