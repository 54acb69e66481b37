// Sign in, and the list of models.

function signInView(reason?: unknown): void {
  const input = el("input", {
    id: "token",
    type: "password",
    autocomplete: "off",
    placeholder: "admin token",
  }) as HTMLInputElement;
  const status = el("p", { id: "signin-status" });
  const form = el(
    "form",
    { id: "signin" },
    el("h2", {}, "Sign in"),
    el("p", {}, "An admin token with the read scope (rollout changes need the rollout scope). It is kept for this browser tab only."),
    el("label", { for: "token" }, "Admin token"),
    input,
    el("button", { type: "submit" }, "Sign in"),
    status,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    try {
      await api("/v1/admin/models");
      // Back to where the operator was going (a bookmark or a deep link), else the models.
      const wanted = location.hash && location.hash !== "#/signin" ? location.hash : "#/models";
      if (location.hash === wanted) {
        void render();
      } else {
        location.hash = wanted;
      }
    } catch (e) {
      sessionStorage.removeItem(TOKEN_KEY);
      status.replaceChildren(errorBox(e));
    }
  });
  if (reason !== undefined) {
    status.replaceChildren(errorBox(reason));
  }
  main().replaceChildren(form);
}

// ---------------------------------------------------------------------------------------------
// Models

function badge(m: Json): HTMLElement {
  const badges: HTMLElement[] = [];
  if (rolledBack(m.rollout_action, m.rollout_state)) {
    badges.push(el("span", { class: "badge warn" }, "rolled back"));
  } else if (m.rollout_state === "halted") {
    badges.push(el("span", { class: "badge bad" }, "halted"));
  } else if (m.rollout_state === "paused") {
    badges.push(el("span", { class: "badge warn" }, "paused"));
  }
  if (m.deny_entries > 0) {
    badges.push(el("span", { class: "badge warn" }, `${m.deny_entries} deny entries`));
  }
  if (!badges.length) {
    badges.push(el("span", { class: "badge ok" }, "ok"));
  }
  return el("span", {}, ...badges);
}

async function modelsView(): Promise<void> {
  const root = main();
  const body = await api("/v1/admin/models");
  const rows = (body.models as Json[]).map((m) => [
    link(`#/model/${encodeURIComponent(m.model)}`, m.model),
    m.live && m.baseline && m.live !== m.baseline ? `${m.live} (${m.baseline} revoked)` : (m.live ?? m.baseline ?? "–"),
    m.staged ? `${m.staged} at ${m.percent}%` : "–",
    rolledBack(m.rollout_action, m.rollout_state) ? "rolled back" : m.rollout_state ?? "–",
    m.ramp_step === null || m.ramp_step === undefined ? "–" : String(m.ramp_step + 1),
    badge(m),
  ]);
  root.replaceChildren(
    el("h2", {}, "Models"),
    rows.length
      ? table("models", ["model", "baseline", "staged", "rollout", "ramp step", "health"], rows)
      : el("p", {}, "No model is published yet."),
  );
}
