//! Lease tokens: the secret that proves one acquisition.

use std::fmt;

/// 128 random bits as 32 hex digits, unique to one acquisition.
///
/// `Debug` and `Display` show only a prefix (the lease id), so logs never carry a usable token.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// A fresh token from the thread-local CSPRNG.
    pub fn random() -> Self {
        Token(format!("{:032x}", rand::random::<u128>()))
    }

    /// A token the client sent back (validated for size by the caller).
    pub fn from_client(token: String) -> Self {
        Token(token)
    }

    /// The full secret: for Redis and for the one client it belongs to, never for logs.
    pub fn secret(&self) -> &str {
        &self.0
    }

    /// A short, non-secret id for logs.
    pub fn lease_id(&self) -> &str {
        self.0.get(..8).unwrap_or("")
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({}…)", self.lease_id())
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}…", self.lease_id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_128_bit_hex_and_distinct() {
        let a = Token::random();
        let b = Token::random();
        assert_eq!(a.secret().len(), 32);
        assert!(a.secret().chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        assert!(!format!("{a:?}").contains(a.secret()));
    }
}
