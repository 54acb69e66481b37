//! A real nginx in front of a test server: a reverse proxy that appends the client's address
//! to `X-Forwarded-For` (`$proxy_add_x_forwarded_for`), as deployments behind a load balancer
//! or an edge proxy run. Debian's `nginx-light` (tests/setup.sh installs it).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running nginx, stopped when dropped.
#[derive(Debug)]
pub struct Nginx {
    child: Child,
    /// Where clients reach it (`http://127.0.0.1:<port>`).
    pub url: String,
    _dir: tempfile::TempDir,
}

/// The nginx binary (`/usr/sbin` is not on every user's `PATH`).
fn binary() -> PathBuf {
    let sbin = PathBuf::from("/usr/sbin/nginx");
    if sbin.is_file() {
        return sbin;
    }
    PathBuf::from("nginx")
}

impl Nginx {
    /// Starts nginx on a free loopback port, proxying every request to `upstream` (a base URL,
    /// `http://127.0.0.1:<port>`) with the client's address appended to `X-Forwarded-For`.
    pub fn reverse_proxy(upstream: &str) -> Nginx {
        let dir = tempfile::tempdir().expect("nginx dir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let d = dir.path().display();
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
             error_log {d}/error.log warn;\nevents {{ worker_connections 512; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n\
             proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n\
             uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
             server {{\n    listen 127.0.0.1:{port};\n    client_max_body_size 16m;\n\
             location / {{\n      proxy_pass {upstream};\n      proxy_http_version 1.1;\n\
             proxy_set_header Connection \"\";\n\
             proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n    }}\n  }}\n}}\n"
        );
        let path = dir.path().join("nginx.conf");
        std::fs::write(&path, conf).expect("nginx.conf");
        let child = Command::new(binary())
            .arg("-c")
            .arg(&path)
            .arg("-p")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("nginx is needed for this test; tests/setup.sh installs nginx-light");
        let nginx = Nginx {
            child,
            url: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        };
        let until = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < until, "nginx did not start on port {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        nginx
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
