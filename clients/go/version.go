package leasehold

// Version is this module's release, the same number as every other Leasehold package (the
// server, the Rust, Python, Node and Java clients). Go reads a module's version from its tag
// (clients/go/vX.Y.Z), which a copy of the source does not carry, so the module states it too;
// scripts/bump-version.sh changes it with the others and its --check keeps them equal.
const Version = "0.1.0"
