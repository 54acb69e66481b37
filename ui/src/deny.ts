// The deny list on the health page: every entry with override and clear, and a form to deny a
// variant on a device class by hand. Each change first says what it does to which devices
// and waits for Confirm; the server's refusal is shown as it is.

/** What a deny-list change does, in words, naming the device class. */
function denyEffect(c: Json): string {
  const who = `devices with ${classLabel(c.class)} ${c.value}`;
  const what = `${c.variant} of ${c.release}`;
  const slow = c.kind === "slow_in_field" || c.kind === "crashed_in_field";
  const found = c.kind === "crashed_in_field" ? "crashed the app there" : "found it slow there";
  switch (c.action) {
    case "override":
      return slow
        ? `${who} get ${what} ranked as the release orders it again, although the field ${found}; new reports do not move it back until you clear the override.`
        : `${who} are offered ${what} again, although it fell back there; new failures do not deny it again until you clear the override.`;
    case "clear":
      return `The entry for ${what} on ${who} is removed: they are offered it as the release orders it, and the fleet's telemetry may deny it again.`;
    default:
      return slow
        ? `${who} get the next candidate ranked before ${what}.`
        : `${who} are no longer offered ${what}; they get the release's next candidate for them, if any.`;
  }
}

/** A deny-list kind as people say it. */
function kindLabel(k: string | undefined): string {
  return k === "slow_in_field" ? "slow in field" : k === "crashed_in_field" ? "crashed in field" : "fallback";
}

/** A device class as people say it. */
function classLabel(c: string): string {
  return c === "soc" ? "SoC" : c === "device_model" ? "device model" : c;
}

/** Shows `change`'s effect in `box` with Confirm and Cancel; Confirm sends it. */
function confirmDeny(box: HTMLElement, enc: string, change: Json, onDone: () => void): void {
  const confirm = el("button", { type: "button", class: "deny-confirm" }, `Confirm ${change.action}`) as HTMLButtonElement;
  const cancel = el("button", { type: "button", class: "deny-cancel" }, "Cancel");
  confirm.addEventListener("click", async () => {
    confirm.disabled = true;
    try {
      await post(`/v1/admin/models/${enc}/deny`, change);
      onDone();
    } catch (e) {
      box.replaceChildren(errorBox(e));
    }
  });
  cancel.addEventListener("click", () => box.replaceChildren());
  box.replaceChildren(el("p", { class: "deny-effect" }, denyEffect(change)), confirm, cancel);
  confirm.focus();
}

/** The deny list with override and clear on every entry (each confirmed in `confirmBox`). */
function denyTable(enc: string, h: Json, confirmBox: HTMLElement, onDone: () => void): HTMLElement {
  const rows = (h.deny as Json[]).map((d) => {
    const act = (action: string) => {
      const b = el("button", { type: "button", class: `deny-${action}` }, action) as HTMLButtonElement;
      b.addEventListener("click", () =>
        confirmDeny(
          confirmBox,
          enc,
          { action, release: d.release, variant: d.variant, class: d.class, value: d.value, kind: d.kind ?? "fallback" },
          onDone,
        ),
      );
      if (!may("rollout")) {
        b.disabled = true;
        b.title = "this token lacks the rollout scope";
      }
      return b;
    };
    return [
      d.release,
      d.variant,
      `${classLabel(d.class)} ${d.value}`,
      d.state === "allow"
        ? `${kindLabel(d.kind)}, overridden: offered as the release orders it`
        : d.kind === "fallback" || !d.kind
          ? "fallback (not offered)"
          : `${kindLabel(d.kind)} (ranked after the next candidate)`,
      denyWhy(d),
      d.state,
      // An overridden entry can only be cleared.
      el("span", {}, d.state === "allow" ? "" : act("override"), act("clear")),
    ];
  });
  return el(
    "section",
    { id: "deny-section" },
    el("h3", {}, "Deny list"),
    rows.length
      ? table("deny", ["release", "variant", "devices", "kind", "why", "state", ""], rows)
      : el("p", { id: "deny-empty" }, "Nothing is denied."),
  );
}

/** The form that denies a published release's variant on one SoC or device model by hand
 * (`model` is the model API's answer: its releases and their variants). */
function denyForm(enc: string, model: Json, confirmBox: HTMLElement, onDone: () => void): HTMLElement {
  const releases = (model.releases as Json[]) ?? [];
  const release = el(
    "select",
    { id: "deny-release" },
    ...releases.map((r) => el("option", { value: r.version }, `${r.version} (${r.state})`)),
  ) as HTMLSelectElement;
  const variant = el("select", { id: "deny-variant" }) as HTMLSelectElement;
  const fill = () =>
    variant.replaceChildren(
      ...((releases.find((r) => r.version === release.value)?.variants ?? []) as Json[]).map((v) =>
        el("option", { value: v.id }, `${v.id} (${v.delegate})`),
      ),
    );
  release.addEventListener("change", fill);
  fill();
  const cls = el(
    "select",
    { id: "deny-class" },
    el("option", { value: "soc" }, "SoC"),
    el("option", { value: "device_model" }, "device model"),
  ) as HTMLSelectElement;
  const value = el("input", { id: "deny-value", type: "text", placeholder: "e.g. SM8550", autocomplete: "off" }) as HTMLInputElement;
  const kind = el(
    "select",
    { id: "deny-kind" },
    el("option", { value: "fallback" }, "not offered (it fails there)"),
    el("option", { value: "slow_in_field" }, "ranked after the next candidate (slow there)"),
    el("option", { value: "crashed_in_field" }, "ranked after the next candidate (it crashes there)"),
  ) as HTMLSelectElement;
  const add = el("button", { type: "button", id: "deny-add" }, "Deny…");
  add.addEventListener("click", () => {
    if (!value.value.trim() || !variant.value) {
      confirmBox.replaceChildren(
        el("p", { class: "error", role: "alert" }, "Pick a release and variant, and name the SoC or device model."),
      );
      return;
    }
    confirmDeny(
      confirmBox,
      enc,
      {
        action: "deny",
        release: release.value,
        variant: variant.value,
        class: cls.value,
        value: value.value.trim(),
        kind: kind.value,
      },
      onDone,
    );
  });
  return guarded(
    el(
      "fieldset",
      { id: "deny-form" },
      el("legend", {}, "Deny a variant on a device class"),
      labelled("release", release),
      labelled("variant", variant),
      labelled("class", cls),
      labelled("value", value),
      labelled("kind", kind),
      add,
    ),
    "rollout",
  );
}
