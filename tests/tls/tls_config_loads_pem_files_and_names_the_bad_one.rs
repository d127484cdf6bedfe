//! Issue 12: TLS settings load from PEM files; a missing or malformed file,
//! a key that is not the certificate's, or a certificate that names no node
//! is an error that names the file and what is wrong with it.

use std::fs;
use std::path::{Path, PathBuf};

use crate::tls_support::TestCa;
use isrlog::{Error, NodeId, TlsConfig};

struct Files {
    _dir: tempfile::TempDir,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn write_files(ca: &TestCa, cert_pem: &str, key_pem: &str) -> Files {
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        fs::write(&path, text).expect("write PEM");
        path
    };
    Files {
        ca: write("ca.pem", &ca.pem()),
        cert: write("node.pem", cert_pem),
        key: write("node.key", key_pem),
        _dir: dir,
    }
}

/// The `Error::Tls` message, asserting it names `path` and mentions `needle`.
fn assert_tls_error(result: Result<TlsConfig, Error>, path: &Path, needle: &str) {
    match result {
        Err(error @ Error::Tls { .. }) => {
            let message = error.to_string();
            assert!(
                message.contains(&path.display().to_string()),
                "error does not name {}: {message}",
                path.display()
            );
            assert!(
                message.contains(needle),
                "error lacks {needle:?}: {message}"
            );
        }
        other => panic!(
            "expected Error::Tls naming {}, got {other:?}",
            path.display()
        ),
    }
}

#[test]
fn good_files_load_and_name_the_node() {
    let ca = TestCa::new("files CA");
    let cert = ca.node_cert(NodeId(7));
    let files = write_files(&ca, &cert.cert_pem, &cert.key_pem);
    let tls = TlsConfig::from_pem_files(&files.ca, &files.cert, &files.key).expect("loads");
    assert_eq!(tls.node(), NodeId(7));
    // The key never shows in debug output.
    assert!(!format!("{tls:?}").contains("PRIVATE"));
}

#[test]
fn each_bad_file_is_named() {
    let ca = TestCa::new("files CA");
    let cert = ca.node_cert(NodeId(7));
    let other = ca.node_cert(NodeId(8));

    let files = write_files(&ca, &cert.cert_pem, &cert.key_pem);
    let missing = files.ca.with_file_name("absent.pem");
    assert_tls_error(
        TlsConfig::from_pem_files(&missing, &files.cert, &files.key),
        &missing,
        "CA",
    );
    fs::write(&files.ca, "not a certificate\n").expect("write");
    assert_tls_error(
        TlsConfig::from_pem_files(&files.ca, &files.cert, &files.key),
        &files.ca,
        "no CERTIFICATE",
    );

    let files = write_files(&ca, &cert.key_pem, &cert.key_pem);
    assert_tls_error(
        TlsConfig::from_pem_files(&files.ca, &files.cert, &files.key),
        &files.cert,
        "no CERTIFICATE",
    );

    let files = write_files(&ca, &cert.cert_pem, &cert.cert_pem);
    assert_tls_error(
        TlsConfig::from_pem_files(&files.ca, &files.cert, &files.key),
        &files.key,
        "private key",
    );

    // Node 8's key with node 7's certificate.
    let files = write_files(&ca, &cert.cert_pem, &other.key_pem);
    assert_tls_error(
        TlsConfig::from_pem_files(&files.ca, &files.cert, &files.key),
        &files.key,
        "",
    );

    let nameless = ca.cert_for_names(&["db7.example.com".to_string()]);
    let files = write_files(&ca, &nameless.cert_pem, &nameless.key_pem);
    assert_tls_error(
        TlsConfig::from_pem_files(&files.ca, &files.cert, &files.key),
        &files.cert,
        "names no node",
    );
}
