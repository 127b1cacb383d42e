//! `locks-agent`: filled in by a later issue.
