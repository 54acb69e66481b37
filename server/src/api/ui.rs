//! The operator dashboard: `GET /ui` and `GET /ui/{file}` serve the static files `ui/build.sh`
//! builds into `server/ui/`, embedded in the binary (the page works offline, with no CDN). The
//! files hold no data: the page asks the operator for an admin token and calls the admin API
//! with it, so without a token nothing but the sign-in form is shown.

use actix_web::http::header;
use actix_web::{HttpResponse, web};

/// Each file: name, content type, bytes.
const FILES: &[(&str, &str, &[u8])] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_bytes!("../../ui/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../ui/app.js"),
    ),
    (
        "app.css",
        "text/css; charset=utf-8",
        include_bytes!("../../ui/app.css"),
    ),
    (
        "uPlot.iife.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../../ui/uPlot.iife.min.js"),
    ),
    (
        "uPlot.min.css",
        "text/css; charset=utf-8",
        include_bytes!("../../ui/uPlot.min.css"),
    ),
    (
        "uPlot.LICENSE",
        "text/plain; charset=utf-8",
        include_bytes!("../../ui/uPlot.LICENSE"),
    ),
];

/// Scripts and styles only from this server, no framing, no plugins; the page talks only to
/// this server.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn serve(name: &str) -> HttpResponse {
    match FILES.iter().find(|(n, _, _)| *n == name) {
        Some((_, content_type, bytes)) => HttpResponse::Ok()
            .insert_header((header::CONTENT_TYPE, *content_type))
            .insert_header((header::CONTENT_SECURITY_POLICY, CSP))
            .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
            .insert_header((header::REFERRER_POLICY, "no-referrer"))
            .insert_header((header::CACHE_CONTROL, "no-cache"))
            .body(*bytes),
        // The same JSON error as every other unknown path.
        None => actix_web::ResponseError::error_response(&crate::api::error::ApiError::new(
            ferry_shared::errors::ErrorCode::NotFound,
            "no such file in the dashboard",
        )),
    }
}

/// `GET /`: the server's root sends a browser to the dashboard.
pub async fn to_dashboard() -> HttpResponse {
    HttpResponse::Found()
        .insert_header((actix_web::http::header::LOCATION, "/ui"))
        .finish()
}

/// `GET /ui`: the page.
pub async fn index() -> HttpResponse {
    serve("index.html")
}

/// `GET /ui/{file}`: one of the page's files.
pub async fn file(name: web::Path<String>) -> HttpResponse {
    serve(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_refers_only_to_files_that_are_served() {
        let index = std::str::from_utf8(FILES[0].2).expect("utf-8");
        for part in index.split("\"/ui/").skip(1) {
            let name = part.split('"').next().expect("name");
            assert!(
                FILES.iter().any(|(n, _, _)| *n == name),
                "index.html refers to /ui/{name}, which is not embedded"
            );
        }
    }
}
