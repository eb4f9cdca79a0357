//! How each option's value is read: the parsers behind `Setting`, and the value types they give.

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use clap::builder::TypedValueParser;
use clap::Arg;

use super::LogFormat;

/// The shortest lease, stream idle and ping interval accepted: shorter ones would make the
/// renewal, stall and ping loops spin.
const MIN_INTERVAL_SECS: f64 = 0.1;

/// A listen address as given; empty means the default, which depends on the tokens.
#[derive(Clone, Copy, Debug)]
pub struct Address(pub(super) Option<SocketAddr>);

/// A provider's `max_concurrent` as given; empty means no limit.
#[derive(Clone, Copy, Debug)]
pub struct MaxConcurrent(pub(super) Option<u32>);

/// Reads an option's value as the environment has always been read: blanks around it are ignored,
/// an empty value means the default (docker compose passes an unset variable as empty), and a bad
/// value is reported with the variable's name.
#[derive(Clone)]
pub(super) struct Setting<T>(pub(super) fn(&str, &str) -> Result<T, String>);

impl<T: Clone + Send + Sync + 'static> TypedValueParser for Setting<T> {
    type Value = T;

    fn parse_ref(&self, cmd: &clap::Command, arg: Option<&Arg>, value: &OsStr) -> Result<T, clap::Error> {
        let name = arg
            .and_then(Arg::get_env)
            .map(OsStr::to_string_lossy)
            .unwrap_or_default()
            .into_owned();
        let default = arg
            .and_then(|arg| arg.get_default_values().first())
            .map(|default| default.to_string_lossy().into_owned())
            .unwrap_or_default();
        let parse = self.0;
        // A closure is a value parser whose errors clap reports with the option and the value.
        let parser = move |value: &str| {
            let value = value.trim();
            parse(&name, if value.is_empty() { &default } else { value })
        };
        parser.parse_ref(cmd, arg, value)
    }
}

pub(super) fn parsed<T: FromStr>(name: &str, value: &str) -> Result<T, String> {
    value.parse().map_err(|_| format!("{name}: cannot parse {value:?}"))
}

pub(super) fn seconds(name: &str, value: &str) -> Result<f64, String> {
    let secs: f64 = parsed(name, value)?;
    if !(secs > 0.0 && secs < 1e9) {
        return Err(format!("{name}: must be a positive number of seconds"));
    }
    Ok(secs)
}

/// A duration some loop waits on: at least `MIN_INTERVAL_SECS`.
pub(super) fn interval(name: &str, value: &str) -> Result<f64, String> {
    let secs = seconds(name, value)?;
    if secs < MIN_INTERVAL_SECS {
        return Err(format!(
            "{name}: {value} s is too short; the least accepted is {MIN_INTERVAL_SECS} s"
        ));
    }
    Ok(secs)
}

/// A number of days as given; blank means none.
#[derive(Clone, Copy, Debug)]
pub struct Days(pub(super) Option<f64>);

/// A positive decimal number of days (under about 27 000 years, so that it stays a duration).
pub(super) fn days(name: &str, value: &str) -> Result<Days, String> {
    if value.is_empty() {
        return Ok(Days(None));
    }
    let days: f64 = parsed(name, value)?;
    if !(days > 0.0 && days < 1e7) {
        return Err(format!("{name}: must be a positive number of days, e.g. 30 or 0.5"));
    }
    Ok(Days(Some(days)))
}

pub(super) fn address(name: &str, value: &str) -> Result<Address, String> {
    if value.is_empty() {
        return Ok(Address(None));
    }
    parsed(name, value).map(|addr| Address(Some(addr)))
}

pub(super) fn positive<T: FromStr + PartialOrd + Default>(name: &str, value: &str) -> Result<T, String> {
    let n: T = parsed(name, value)?;
    if n <= T::default() {
        return Err(format!("{name}: must be at least 1"));
    }
    Ok(n)
}

/// At most this many runtime threads: more is a typo, and the operating system may refuse to start them.
const MAX_RUNTIME_THREADS: usize = 1024;

pub(super) fn runtime_threads(name: &str, value: &str) -> Result<usize, String> {
    count_up_to(name, value, MAX_RUNTIME_THREADS)
}

/// At most this many claimers: each holds a pooled connection while it claims.
const MAX_CLAIMERS: usize = 16;

pub(super) fn claimers(name: &str, value: &str) -> Result<usize, String> {
    count_up_to(name, value, MAX_CLAIMERS)
}

/// A whole number from 1 to `max`.
fn count_up_to(name: &str, value: &str, max: usize) -> Result<usize, String> {
    let n: usize = positive(name, value)?;
    if n > max {
        return Err(format!("{name}: must be at most {max}"));
    }
    Ok(n)
}

/// The largest `max_concurrent` a provider takes (as `PUT /v1/providers` accepts).
const MAX_PROVIDER_CONCURRENCY: u32 = 1024;

pub(super) fn max_concurrent(name: &str, value: &str) -> Result<MaxConcurrent, String> {
    if value.is_empty() {
        return Ok(MaxConcurrent(None));
    }
    let n: u32 = positive(name, value)?;
    if n > MAX_PROVIDER_CONCURRENCY {
        return Err(format!("{name}: must be at most {MAX_PROVIDER_CONCURRENCY}"));
    }
    Ok(MaxConcurrent(Some(n)))
}

pub(super) fn boolean(name: &str, value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        other => Err(format!("{name}: expected true or false, got {other:?}")),
    }
}

/// Seconds, as a comma-separated list.
#[derive(Clone, Debug)]
pub struct SecondsList(pub Vec<f64>);

/// A comma-separated list of delays in seconds (each 0 or more); empty entries are ignored.
pub(super) fn seconds_list(name: &str, value: &str) -> Result<SecondsList, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match s.parse::<f64>() {
            Ok(secs) if (0.0..1e9).contains(&secs) => Ok(secs),
            _ => Err(format!("{name}: {s:?} is not a number of seconds")),
        })
        .collect::<Result<_, _>>()
        .map(SecondsList)
}

pub(super) fn log_format(name: &str, value: &str) -> Result<LogFormat, String> {
    match value {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        other => Err(format!("{name}: expected text or json, got {other:?}")),
    }
}

/// An address, or blank for none (checked here, parsed again by `from_args`).
pub(super) fn optional_address(name: &str, value: &str) -> Result<String, String> {
    if !value.is_empty() {
        parsed::<SocketAddr>(name, value)?;
    }
    Ok(value.to_owned())
}

/// An http(s) URL without query or fragment, kept without its trailing `/`; empty is unset.
pub(super) fn public_url(name: &str, value: &str) -> Result<String, String> {
    if value.is_empty() {
        return Ok(String::new());
    }
    match url::Url::parse(value) {
        Ok(url)
            if matches!(url.scheme(), "http" | "https")
                && url.host_str().is_some()
                && url.query().is_none()
                && url.fragment().is_none() =>
        {
            Ok(value.trim_end_matches('/').to_owned())
        }
        _ => Err(format!(
            "{name} must be an http or https URL such as https://desk.example.com, not {value:?}"
        )),
    }
}

pub(super) fn text(_: &str, value: &str) -> Result<String, String> {
    Ok(value.to_owned())
}

pub(super) fn path(_: &str, value: &str) -> Result<PathBuf, String> {
    Ok(PathBuf::from(value))
}
