// Explain: what a device would get, and why.

function explainView(): void {
  const field = (id: string, label: string, value = "") =>
    el("label", {}, label, el("input", { id, value, type: "text" }));
  const out = el("div", { id: "explain-result" });
  const form = el(
    "form",
    { id: "explain" },
    el("h2", {}, "Explain a resolve"),
    field("ex-model", "model"),
    field("ex-platform", "platform", "android"),
    field("ex-os", "OS version", "14"),
    field("ex-soc", "SoC"),
    field("ex-device", "device model"),
    field("ex-ram", "RAM (MiB)", "8192"),
    field("ex-app", "app version", "1.0.0"),
    field("ex-runtime", "runtime version", "1.5.1"),
    field("ex-backends", "backends (comma-separated)", "XnnpackBackend"),
    field("ex-install", "install id", "dashboard-explain"),
    el("button", { type: "submit" }, "Explain"),
    out,
  );
  const value = (id: string) => (form.querySelector(`#${id}`) as HTMLInputElement).value.trim();
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const ram = Number(value("ex-ram"));
    if (!Number.isInteger(ram) || ram < 0) {
      out.replaceChildren(el("p", { class: "error", role: "alert" }, "RAM must be a whole number of MiB."));
      return;
    }
    const device = {
      model: value("ex-model"),
      install_id: value("ex-install"),
      app_version: value("ex-app"),
      runtime_version: value("ex-runtime"),
      backends: value("ex-backends")
        .split(",")
        .map((s) => s.trim())
        .filter((s) => s),
      platform: value("ex-platform"),
      os_version: value("ex-os"),
      device_model: value("ex-device"),
      soc: value("ex-soc"),
      ram_mb: ram,
    };
    try {
      const r = await post("/v1/resolve?explain=true", device);
      const entries = (r.explain ?? []) as Json[];
      const chosen = entries
        .filter((e) => e.rank !== undefined)
        .sort((a, b) => a.rank - b.rank);
      out.replaceChildren(
        el(
          "p",
          { id: "explain-chosen" },
          chosen.length
            ? `Gets ${chosen[0].release} ${chosen[0].variant} (${chosen[0].delegate})${chosen.length > 1 ? `, then ${chosen.slice(1).map((c) => c.variant).join(", ")}` : ""}`
            : "Gets nothing",
        ),
        table(
          "explain-table",
          ["release", "variant", "delegate", "rank", "why"],
          entries.map((e) => [
            e.release,
            e.variant,
            e.delegate,
            e.rank === undefined ? "–" : String(e.rank),
            (e.reasons as string[]).join("; "),
          ]),
        ),
      );
    } catch (e) {
      out.replaceChildren(errorBox(e));
    }
  });
  main().replaceChildren(form);
}
