// Routing: the view for the address, and the page's event handlers.

/** Model names and versions as the server spells them; anything else is not fetched. */
const NAME = /^[A-Za-z0-9._+-]{1,128}$/;

async function render(): Promise<void> {
  const gen = ++renderGen;
  const box = document.createElement("div");
  target = box;
  const nav = document.getElementById("nav") as HTMLElement;
  const show = () => {
    if (gen === renderGen) {
      // Charts of views no longer shown are released; this view's stay for resizing.
      const keep = charts.filter((c) => box.contains(c.root));
      for (const c of charts) {
        if (!keep.includes(c)) {
          c.destroy();
        }
      }
      charts = keep;
      (document.getElementById("main") as HTMLElement).replaceChildren(box);
      (box.querySelector("#token") as HTMLElement | null)?.focus();
    }
  };
  if (!token()) {
    nav.hidden = true;
    signInView();
    show();
    return;
  }
  nav.hidden = false;
  // A view that keeps itself current says so (live()); the others show nothing here.
  const status = document.getElementById("live") as HTMLElement;
  status.textContent = "";
  status.className = "muted";
  try {
    await loadScopes();
    let parts: string[];
    try {
      parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
    } catch {
      throw new Error("this address is not one the dashboard knows");
    }
    const named = (i: number) => {
      const v = parts[i];
      if (!v || v === "." || v === ".." || !NAME.test(v)) {
        throw new Error(`${JSON.stringify(v ?? "")} is not a model name or version`);
      }
      return v;
    };
    if (parts[0] === "model" && parts[1] && parts[2] === "release" && parts[3]) {
      await releaseView(named(1), named(3));
    } else if (parts[0] === "model" && parts[1]) {
      await modelView(named(1));
    } else if (parts[0] === "experiment" && parts[1]) {
      await experimentView(named(1));
    } else if (parts[0] === "health" && parts[1]) {
      await healthView(named(1));
    } else if (parts[0] === "explain") {
      explainView();
    } else if (parts.length === 1 && ["", "models", "signin"].includes(parts[0])) {
      await modelsView();
    } else {
      // Not silently the model list: say the address is not one the dashboard has.
      throw new Error(`#/${parts.join("/")} is not a page of the dashboard; the models are at #/`);
    }
  } catch (e) {
    if (e instanceof ApiFailure && e.status === 401) {
      nav.hidden = true;
      signInView(e);
    } else {
      box.replaceChildren(errorBox(e));
    }
  }
  show();
}

window.addEventListener("hashchange", () => {
  void render();
});
window.addEventListener("resize", () => {
  for (const c of charts) {
    c.setSize({ width: chartWidth(), height: 240 });
  }
});
window.addEventListener("DOMContentLoaded", () => {
  (document.getElementById("signout") as HTMLElement).addEventListener("click", signOut);
  void render();
});
