//! Where a webhook may be: its URL checked when the config is set and before every POST, and
//! its host's addresses checked at every connection ([`CheckedResolver`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::HeaderValue;

use super::{MAX_URL_BYTES, PushPolicy};

/// Why a webhook's URL or address is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AddressRefused(String);

fn refused(why: impl Into<String>) -> AddressRefused {
    AddressRefused(why.into())
}

/// `url`, when a webhook may be there under `policy`: `https` (or `http` to a loopback host
/// where the policy takes those), no credentials in it, a host that is a public address or a
/// name (resolved and checked at every connection), at most [`MAX_URL_BYTES`].
pub fn check_url(url: &str, policy: PushPolicy) -> Result<Url, AddressRefused> {
    if url.len() > MAX_URL_BYTES {
        return Err(refused(format!("the URL is longer than {MAX_URL_BYTES} bytes")));
    }
    let parsed = Url::parse(url).map_err(|e| refused(format!("the URL does not parse: {e}")))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(refused("the URL must not carry credentials; use authentication"));
    }
    let loopback = match parsed.host() {
        Some(url::Host::Ipv4(ip)) => {
            check_ip(IpAddr::V4(ip), policy)?;
            ip.is_loopback()
        }
        Some(url::Host::Ipv6(ip)) => {
            check_ip(IpAddr::V6(ip), policy)?;
            ip.is_loopback()
        }
        Some(url::Host::Domain(name)) => check_name(name, policy)?,
        None => return Err(refused("the URL names no host")),
    };
    match parsed.scheme() {
        "https" => {}
        "http" if loopback && policy.loopback => {}
        "http" => return Err(refused("the URL must be https")),
        other => return Err(refused(format!("the URL's scheme {other:?} is not https"))),
    }
    // What the POST's `Host` will carry.
    HeaderValue::from_str(parsed.host_str().unwrap_or_default())
        .map_err(|_| refused("the URL's host cannot be sent"))?;
    Ok(parsed)
}

/// Whether host name `name` may be a webhook's: not a name for this machine or the network's
/// own (`localhost`, `*.internal`, `*.local`, a single label such as `metadata`); `Ok(true)`
/// for a loopback name the policy takes.
fn check_name(name: &str, policy: PushPolicy) -> Result<bool, AddressRefused> {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        return if policy.loopback {
            Ok(true)
        } else {
            Err(refused(format!("the host {name} is this machine")))
        };
    }
    if !name.contains('.') || name.ends_with(".internal") || name.ends_with(".local") {
        return Err(refused(format!("the host {name} is not a public name")));
    }
    Ok(false)
}

/// Whether `ip` may be a webhook's: a public address (a loopback one where the policy takes it).
pub(super) fn check_ip(ip: IpAddr, policy: PushPolicy) -> Result<(), AddressRefused> {
    let ip = match ip {
        IpAddr::V6(v6) => embedded_v4(v6).map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 @ IpAddr::V4(_) => v4,
    };
    if ip.is_loopback() && policy.loopback {
        return Ok(());
    }
    let private = match ip {
        IpAddr::V4(v4) => !public_v4(v4),
        IpAddr::V6(v6) => !public_v6(v6),
    };
    if private {
        Err(refused(format!("the address {ip} is not a public one")))
    } else {
        Ok(())
    }
}

fn public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_private()
        || ip.is_loopback()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        // Shared (carrier-grade NAT), 100.64.0.0/10.
        || (a == 100 && (b & 0xc0) == 64)
        // IETF protocol assignments, 192.0.0.0/24.
        || (a == 192 && b == 0 && c == 0)
        // Benchmarking, 198.18.0.0/15.
        || (a == 198 && (b & 0xfe) == 18)
        // Reserved, 240.0.0.0/4.
        || a >= 240)
}

fn public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    let first = s[0];
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        // SIIT, ::ffff:0:0:0/96.
        || (s[..4] == [0, 0, 0, 0] && s[4] == 0xffff && s[5] == 0)
        // Local-use NAT64, 64:ff9b:1::/48.
        || (first == 0x0064 && s[1] == 0xff9b && s[2] == 1)
        // Discard-only, 100::/64.
        || (first == 0x0100 && s[1..4] == [0, 0, 0])
        // Teredo, 2001::/32 (an IPv4 address behind it).
        || (first == 0x2001 && s[1] == 0)
        // Unique local (fc00::/7: AWS's IMDS at fd00:ec2::254 among them).
        || (first & 0xfe00) == 0xfc00
        // Link-local, fe80::/10; site-local, fec0::/10.
        || (first & 0xffc0) == 0xfe80
        || (first & 0xffc0) == 0xfec0
        // Documentation, 2001:db8::/32 and 3fff::/20.
        || (first == 0x2001 && s[1] == 0x0db8)
        || (first == 0x3fff && (s[1] & 0xf000) == 0))
}

/// The IPv4 address an IPv6 one carries: mapped (`::ffff:a.b.c.d`), compatible
/// (`::a.b.c.d`, but `::` and `::1`), NAT64 (`64:ff9b::/96`) or 6to4 (`2002::/16`), judged as
/// that address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = ip.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match s {
        [0, 0, 0, 0, 0, 0, 0, 0 | 1] => None,
        [0, 0, 0, 0, 0, 0, hi, lo] => Some(v4(hi, lo)),
        [0x0064, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(v4(hi, lo)),
        [0x2002, hi, lo, ..] => Some(v4(hi, lo)),
        _ => None,
    }
}

/// The refusal of an address somewhere in `error`'s chain of sources (the resolver's, inside
/// the client's failure to connect).
pub(super) fn refusal_in(error: &(dyn std::error::Error + 'static)) -> Option<AddressRefused> {
    let mut at = Some(error);
    while let Some(error) = at {
        if let Some(refused) = error.downcast_ref::<AddressRefused>() {
            return Some(refused.clone());
        }
        // An I/O error's source is its inner error's source: the inner one is looked at too.
        at = match error
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => error.source(),
        };
    }
    None
}

/// The resolver of the push client: a name is resolved, and refused if any address it resolves
/// to is one a webhook may not be at, so the connection goes only where the check said.
#[derive(Debug, Clone, Copy)]
pub(super) struct CheckedResolver {
    pub(super) policy: PushPolicy,
}

impl Resolve for CheckedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if found.is_empty() {
                return Err(format!("{host} resolves to no address").into());
            }
            for at in &found {
                // Kept as the error's own type, so the delivery tells it from a failure to connect.
                check_ip(at.ip(), policy).map_err(|e| Box::new(refused(format!("{host}: {e}"))))?;
            }
            Ok(Box::new(found.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRICT: PushPolicy = PushPolicy { loopback: false };
    const LOCAL: PushPolicy = PushPolicy { loopback: true };

    #[test]
    fn a_public_https_url_is_taken() {
        for url in [
            "https://example.com/webhook",
            "https://hooks.example.org:8443/a2a?x=1",
            "https://8.8.8.8/hook",
            "https://[2606:4700::1111]/hook",
        ] {
            assert!(check_url(url, STRICT).is_ok(), "{url}");
        }
    }

    #[test]
    fn private_loopback_link_local_and_metadata_addresses_are_refused() {
        for url in [
            "https://10.0.0.1/h",
            "https://172.16.3.4/h",
            "https://192.168.1.1/h",
            "https://127.0.0.1/h",
            "https://169.254.169.254/latest/meta-data/",
            "https://100.64.0.1/h",
            "https://0.0.0.0/h",
            "https://[::1]/h",
            "https://[fd00:ec2::254]/h",
            "https://[fe80::1]/h",
            "https://[::ffff:169.254.169.254]/h",
            "https://[64:ff9b::a9fe:a9fe]/h",
            "https://[2002:a00:1::]/h",
            "https://[::a9fe:a9fe]/h",
            "https://[::ffff:0:a9fe:a9fe]/h",
            "https://[64:ff9b:1::a9fe:a9fe]/h",
            "https://[100::1]/h",
            "https://[3fff:1::1]/h",
            "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/h",
            "https://localhost/h",
            "https://metadata/computeMetadata/v1/",
            "https://metadata.google.internal/h",
            "https://printer.local/h",
            "https://2130706433/h",
        ] {
            assert!(check_url(url, STRICT).is_err(), "{url}");
        }
    }

    #[test]
    fn http_is_taken_only_to_loopback_where_the_policy_says() {
        assert!(check_url("http://example.com/h", STRICT).is_err());
        assert!(check_url("http://example.com/h", LOCAL).is_err());
        assert!(check_url("http://127.0.0.1:8888/h", STRICT).is_err());
        assert!(check_url("http://127.0.0.1:8888/h", LOCAL).is_ok());
        assert!(check_url("http://localhost:8888/webhook", LOCAL).is_ok());
        assert!(check_url("http://10.0.0.1/h", LOCAL).is_err());
    }

    #[test]
    fn odd_urls_are_refused_saying_why() {
        let long = format!("https://example.com/{}", "a".repeat(MAX_URL_BYTES));
        for (url, why) in [
            ("ftp://example.com/h", "scheme"),
            ("https://user:pw@example.com/h", "credentials"),
            ("not a url", "parse"),
            (long.as_str(), "longer"),
        ] {
            let e = check_url(url, STRICT).unwrap_err().to_string();
            assert!(e.contains(why), "{url}: {e}");
        }
    }

    #[test]
    fn a_refusal_is_found_inside_the_errors_that_carry_it() {
        let inner = std::io::Error::other(refused("the address 10.0.0.1 is not a public one"));
        let outer = std::io::Error::other(inner);
        assert_eq!(
            refusal_in(&outer).map(|r| r.to_string()).as_deref(),
            Some("the address 10.0.0.1 is not a public one")
        );
        assert_eq!(refusal_in(&std::io::Error::other("refused")), None);
    }

    #[tokio::test]
    async fn the_resolver_refuses_a_name_of_a_private_address() {
        let strict = CheckedResolver { policy: STRICT };
        let name: Name = "localhost".parse().unwrap();
        assert!(strict.resolve(name).await.is_err());
        let local = CheckedResolver { policy: LOCAL };
        let name: Name = "localhost".parse().unwrap();
        let found: Vec<SocketAddr> = local.resolve(name).await.unwrap().collect();
        assert!(found.iter().all(|a| a.ip().is_loopback()), "{found:?}");
    }
}
