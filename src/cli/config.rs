//! `leasehold serve --config FILE`: a TOML file holding the same options as the flags.
//!
//! The file is turned into the flags it stands for and parsed by the same clap definitions, so
//! every option exists in the file with the same name, value syntax, checks and help, and none
//! can be forgotten there. An option given as a flag or a `LEASEHOLD_*` variable wins: its file
//! entry is skipped.

use std::ffi::OsString;
use std::path::Path;

use clap::ArgMatches;
use clap::parser::ValueSource;

/// The file's entries as `--name=value` arguments, for the options of `serve` that neither a
/// flag nor a variable set. Unknown keys and values of the wrong kind are refused.
pub fn file_args(
    path: &Path,
    serve: &clap::Command,
    given: &ArgMatches,
) -> Result<Vec<OsString>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("cannot read config file {}: {error}", path.display()))?;
    let table: toml::Table = toml::from_str(&text)
        .map_err(|error| format!("config file {}: {error}", path.display()))?;
    let mut args = Vec::new();
    for (key, value) in table {
        let name = key.replace('_', "-");
        let arg = serve
            .get_arguments()
            .find(|arg| arg.get_long() == Some(name.as_str()) && name != "config")
            .ok_or_else(|| {
                format!(
                    "config file {}: unknown option {key:?} (see leasehold serve --help)",
                    path.display()
                )
            })?;
        let overridden = matches!(
            given.value_source(arg.get_id().as_str()),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        );
        if overridden {
            continue;
        }
        let values = match value {
            toml::Value::Array(values) => values,
            value => vec![value],
        };
        for value in values {
            // An on/off switch (`echo = true`) takes no value: present or absent.
            if let toml::Value::Boolean(on) = value
                && !arg.get_action().takes_values()
            {
                if on {
                    args.push(OsString::from(format!("--{name}")));
                }
                continue;
            }
            let text = match value {
                toml::Value::String(text) => text,
                toml::Value::Integer(number) => number.to_string(),
                toml::Value::Boolean(flag) => flag.to_string(),
                other => {
                    return Err(format!(
                        "config file {}: {key} = {other} is not a string, number or true/false",
                        path.display()
                    ));
                }
            };
            args.push(OsString::from(format!("--{name}={text}")));
        }
    }
    Ok(args)
}
