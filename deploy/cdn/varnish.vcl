vcl 4.1;

# Varnish (7.x) as a CDN or site cache in front of ferry (docs/operations.md, "A CDN in front").
#
# What is cached: GET and HEAD of /v1/blobs/sha256/<hex> (programs, data files, assets, chunk
# indexes) and /v1/releases/sha256/<hex> (signed release manifests). Both are immutable and named
# by their SHA-256, so they are kept for a year, keyed by path alone, and never need a purge.
# Byte ranges (resumed downloads, delta updates) are served from the cached object.
#
# A whole blob asked for in the ferry-grouped-zstd encoding (ferry publish stores one for files
# it compresses well; clients ask for it with Accept-Encoding) is another object, cached beside
# the plain one. Varnish rewrites Accept-Encoding for its own gzip handling, so the choice is
# carried in X-Ferry-Encoding, which the cached objects vary on, and given back to ferry on a
# miss. Plain bytes ferry sent to a request for the encoding (it has none for that file) serve
# every request for the path, ranges included, so such a file is fetched once.
#
# What is never cached: everything else. Resolve answers are made for one device class, cohort
# or device (a nonce, a pin), signed time is made for one request, keyrings and revocation lists
# change, telemetry and admin calls are writes or need a token, and the dashboard is for
# operators. They all go to ferry as they came.

# Set to where ferry listens.
backend ferry {
    .host = "127.0.0.1";
    .port = "8080";
    .first_byte_timeout = 60s;
    .between_bytes_timeout = 60s;
}

sub vcl_recv {
    if ((req.method == "GET" || req.method == "HEAD")
        && req.url ~ "^/v1/(blobs|releases)/sha256/[0-9a-f]{64}$") {
        # One object per digest, whatever the host name, cookies or credentials.
        unset req.http.Cookie;
        unset req.http.Authorization;
        if (req.url ~ "^/v1/blobs/" && !req.http.Range
            && req.http.Accept-Encoding ~ "(?i)(^|,)\s*ferry-grouped-zstd\s*(;|,|$)"
            && req.http.Accept-Encoding !~ "(?i)ferry-grouped-zstd\s*;\s*q\s*=\s*(0(\.0*)?|-[^,]*)\s*(,|$)") {
            set req.http.X-Ferry-Encoding = "ferry-grouped-zstd";
            set req.http.Accept-Encoding = "ferry-grouped-zstd";
        } else {
            unset req.http.X-Ferry-Encoding;
            unset req.http.Accept-Encoding;
        }
        return (hash);
    }
    set req.http.X-Ferry-Cache = "pass";
    return (pass);
}

sub vcl_hash {
    hash_data(req.url);
    return (lookup);
}

sub vcl_backend_fetch {
    if (bereq.url ~ "^/v1/blobs/sha256/") {
        if (bereq.http.X-Ferry-Encoding) {
            set bereq.http.Accept-Encoding = bereq.http.X-Ferry-Encoding;
        } else {
            unset bereq.http.Accept-Encoding;
        }
    }
    return (fetch);
}

sub vcl_backend_response {
    if (bereq.url ~ "^/v1/(blobs|releases)/sha256/") {
        if (beresp.status == 200) {
            set beresp.ttl = 365d;
            unset beresp.http.Set-Cookie;
            if (bereq.url ~ "^/v1/blobs/") {
                if (beresp.http.Content-Encoding == "ferry-grouped-zstd") {
                    # The encoding: only for requests that ask for it.
                    set beresp.http.Vary = "X-Ferry-Encoding";
                } elsif (bereq.http.X-Ferry-Encoding) {
                    # The encoding was asked for and ferry has none: these bytes serve every
                    # request, ranges included.
                    unset beresp.http.Vary;
                } else {
                    # Plain bytes asked for plainly: ferry may hold an encoding for the others.
                    set beresp.http.Vary = "X-Ferry-Encoding";
                }
            }
        } else {
            # Not there (yet): ask ferry again next time.
            set beresp.ttl = 0s;
            set beresp.uncacheable = true;
        }
    }
    return (deliver);
}

sub vcl_deliver {
    if (req.url ~ "^/v1/blobs/sha256/" && resp.status < 300) {
        # What ferry itself sends, for caches after this one.
        set resp.http.Vary = "accept-encoding";
    }
    if (req.http.X-Ferry-Cache == "pass") {
        set resp.http.X-Ferry-Cache = "pass";
    } elsif (obj.hits > 0) {
        set resp.http.X-Ferry-Cache = "hit";
    } else {
        set resp.http.X-Ferry-Cache = "miss";
    }
}
