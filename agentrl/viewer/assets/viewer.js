"use strict";
// agentrl trajectory viewer. Data comes from the JSON block; every string is set with
// textContent (never innerHTML), so model and tool output cannot inject markup.
(function () {
  const D = JSON.parse(document.getElementById("data").textContent);
  const SPECIAL = new Set(D.special);
  const $ = (id) => document.getElementById(id);
  const cards = [];
  let colourMode = "mask";
  // Every policy version any episode was sampled with, oldest first: one colour each.
  const VERSIONS = [...new Set(D.episodes.flatMap((r) => (r.versions ? r.versions.list : [])))]
    .sort((a, b) => a - b);

  function el(tag, cls, text) {
    const n = document.createElement(tag);
    if (cls) n.className = cls;
    if (text !== undefined && text !== null) n.textContent = String(text);
    return n;
  }
  function fmt(x, d) {
    return x === null || x === undefined || Number.isNaN(x) ? "–" : Number(x).toFixed(d ?? 3);
  }
  function badge(text, kind) {
    return el("span", "badge" + (kind ? " " + kind : ""), text);
  }
  function shown(text) {
    if (text === "") return "∅";
    return text.replace(/\n/g, "↵\n").replace(/\t/g, "→\t");
  }

  // ---- header ------------------------------------------------------------------------
  function header() {
    $("title").textContent = D.title;
    $("source").textContent =
      D.source + "  ·  " + (D.tokenizer ? "tokenizer: " + D.tokenizer : "no tokenizer: showing ids");
    const s = D.summary;
    const items = [
      ["episodes", s.episodes],
      ["mean reward", fmt(s.mean_reward)],
      ["trained tokens", s.trained_tokens],
      ["env/tool tokens", s.env_tokens],
      ["episodes with errors", s.with_errors],
    ];
    if (D.diff) items.push(["episodes with template drift", s.drifted]);
    if (s.versioned) items.push(["episodes a weight update landed in", s.mixed_versions]);
    if (s.split_episodes) items.push(["episodes split into segments", s.split_episodes]);
    for (const [k, v] of items) {
      const span = el("span", null, k + ": ");
      span.append(el("b", null, v));
      $("stats").append(span);
    }
    if (!D.diff) $("f-drift-label").hidden = true;
  }

  function fillSelect(sel, values) {
    for (const v of [...new Set(values)].sort()) sel.append(new Option(v || "(none)", v));
  }

  // ---- tokens ------------------------------------------------------------------------
  function driftMarks(rec) {
    const marks = new Set();
    const d = rec.diff;
    if (!d || d.status !== "drift") return marks;
    const n = rec.prompt.ids.length + rec.resp.ids.length;
    for (const [tag, i1, i2] of d.ops) {
      if (tag === "insert") marks.add(Math.min(i1, n - 1));
      for (let i = i1; i < i2; i++) marks.add(i);
    }
    return marks;
  }

  function tokSpan(rec, text, id, cls, key, full, marks) {
    const span = el("span", "tok " + cls, text === null ? String(id) : shown(text));
    if (SPECIAL.has(id)) span.classList.add("sp");
    if (marks.has(full)) span.classList.add("drift");
    if (rec.diff && rec.diff.status === "drift" && rec.diff.first === full) {
      span.classList.add("first-drift");
      span.id = "drift-" + rec.i;
    }
    span.dataset.e = rec.i;
    span.dataset.k = key;
    return span;
  }

  function promptTokens(rec, marks) {
    const box = el("div", "toks" + (rec.prompt.text ? "" : " ids"));
    rec.prompt.ids.forEach((id, k) => {
      const text = rec.prompt.text ? rec.prompt.text[k] : null;
      box.append(tokSpan(rec, text, id, "p", "p" + k, k, marks));
    });
    return box;
  }

  function responseTokens(rec, a, b, marks) {
    const box = el("div", "toks" + (rec.resp.text ? "" : " ids"));
    const P = rec.prompt.ids.length;
    for (let k = a; k < b; k++) {
      const text = rec.resp.text ? rec.resp.text[k] : null;
      const cls = rec.resp.mask[k] ? "m1" : "m0";
      const span = tokSpan(rec, text, rec.resp.ids[k], cls, k, P + k, marks);
      paint(span, rec, k);
      box.append(span);
    }
    return box;
  }

  function heat(x) {
    // x in [0, 1]: 0 = red (unlikely / far off), 1 = green
    const h = Math.round(120 * Math.max(0, Math.min(1, x)));
    return "hsl(" + h + ", 75%, 80%)";
  }

  function verColour(v) {
    // spread hues by the golden angle so neighbouring versions never look alike
    const i = VERSIONS.indexOf(v);
    return "hsl(" + Math.round((210 + 137.508 * i) % 360) + ", 70%, 76%)";
  }

  function versionText(span) {
    // "versions 3–4, update landed at token 57, turn 2" (or "version 3")
    const u = span.updates.map((x) => "token " + x.token + ", turn " + x.turn);
    if (span.lo === span.hi) return "version " + span.lo;
    return "versions " + span.lo + "–" + span.hi + ", update" + (u.length > 1 ? "s" : "")
      + " landed at " + u.join("; ");
  }

  function paintVersion(span, rec, k) {
    const v = rec.resp.ver ? rec.resp.ver[k] : null;
    if (v === null || v === undefined) return;
    if (v < 0) { span.classList.add("v-env"); return; }
    span.style.backgroundColor = verColour(v);
    if (v < rec.versions.hi) span.classList.add("v-old");
  }

  function paint(span, rec, k) {
    span.style.background = "";
    span.classList.remove("v-env", "v-old");
    if (colourMode === "ver") { paintVersion(span, rec, k); return; }
    if (colourMode === "mask" || !rec.resp.mask[k]) return;
    const lp = rec.resp.lp[k];
    const tlp = rec.resp.tlp ? rec.resp.tlp[k] : null;
    if (colourMode === "lp") span.style.background = heat(Math.exp(lp));
    else if (colourMode === "tlp" && tlp !== null) span.style.background = heat(Math.exp(tlp));
    else if (colourMode === "ratio" && tlp !== null) {
      const dev = Math.min(1, Math.abs(tlp - lp) / 0.7);
      span.style.background = tlp >= lp
        ? "rgba(217, 45, 32, " + (0.08 + 0.7 * dev) + ")"
        : "rgba(37, 99, 235, " + (0.08 + 0.7 * dev) + ")";
    }
  }

  // ---- episode body ------------------------------------------------------------------
  function sub(title, child, open) {
    const d = el("details", "sub");
    d.append(el("summary", null, title), child);
    if (open) d.open = true;
    return d;
  }

  function imagesFor(rec, turn) {
    const box = el("div", "imgs");
    for (const im of rec.images) {
      if ((im.turn ?? null) !== turn) continue;
      const img = el("img");
      img.src = im.src;
      img.alt = "episode image";
      box.append(img);
    }
    return box.childElementCount ? box : null;
  }

  function opText(ids, text, a, b) {
    // token pieces joined by "|", spaces made visible: the drift is often just whitespace
    const piece = (id, k) => (text ? shown(text[a + k]).replace(/ /g, "␣") : String(id));
    return a === b ? "(nothing)" : ids.slice(a, b).map(piece).join("|");
  }

  function diffBlock(rec) {
    const d = rec.diff;
    const box = el("div", "diff " + d.status);
    const title = el("div");
    const total = rec.prompt.ids.length + rec.resp.ids.length;
    if (d.status === "match") title.append(badge("template render matches", "good"));
    else if (d.status === "prefix") {
      const extra = d.rendered.ids.length - total;
      title.append(badge("render matches; appends " + extra + " token(s) after the end", "good"));
    } else if (d.status === "error") title.append(badge("template failed: " + d.error, "warn"));
    else {
      const at = "drift: first divergence at token " + d.first + " (" + d.where + ")";
      title.append(badge(at, "bad"));
      const jump = el("button", null, "jump to it");
      jump.type = "button";
      jump.addEventListener("click", () => {
        const t = document.getElementById("drift-" + rec.i);
        if (!t) return;
        const host = t.closest("details.sub");
        if (host) host.open = true;
        t.scrollIntoView({ block: "center" });
      });
      title.append(" ", jump);
    }
    box.append(title);
    if (d.status !== "drift") return box;
    const hasText = rec.prompt.text && rec.resp.text;
    const trainedText = hasText ? rec.prompt.text.concat(rec.resp.text) : null;
    const trainedIds = rec.prompt.ids.concat(rec.resp.ids);
    const R = d.rendered;
    for (const [tag, i1, i2, j1, j2] of d.ops.slice(0, 40)) {
      const op = el("div", "op");
      op.append(el("span", "muted", tag + " @" + i1 + ": "));
      const a = el("span", "toks del", opText(trainedIds, trainedText, i1, i2));
      const b = el("span", "toks ins", opText(R.ids, R.text, j1, j2));
      op.append("trained ", a, "  →  render ", b);
      box.append(op);
    }
    if (d.ops.length > 40) box.append(el("div", "muted", "… " + (d.ops.length - 40) + " more"));
    return box;
  }

  function turnBlock(rec, t, k, marks) {
    const box = el("div", "turn");
    const sampled = t.end - t.start, env = t.obs_end - t.end;
    let head = "turn " + k + " · " + sampled + " sampled · " + env + " env/tool tokens";
    head += " · reward " + fmt(t.reward);
    if (t.finish) head += " · finish: " + t.finish;
    if (rec.resp.ver) {
      const vs = [...new Set(rec.resp.ver.slice(t.start, t.end).filter((v) => v >= 0))];
      if (vs.length) head += " · version" + (vs.length > 1 ? "s " : " ") + vs.join("→");
    }
    box.append(el("h3", null, head));
    box.append(responseTokens(rec, t.start, t.obs_end, marks));
    const imgs = imagesFor(rec, k);
    if (imgs) box.append(imgs);
    if (t.calls && t.calls.length) {
      const ul = el("ul", "calls");
      for (const c of t.calls) {
        const li = el("li", c.parse_error ? "error" : "");
        li.append(el("b", null, "call " + c.name), el("span", "muted", c.id ? "  id " + c.id : ""));
        if (c.parse_error) li.append(badge("parse error: " + c.parse_error, "bad"));
        li.append(el("pre", "json", c.args));
        ul.append(li);
      }
      box.append(ul);
    }
    if (t.results && t.results.length) {
      const ul = el("ul", "results");
      for (const r of t.results) {
        const li = el("li", r.is_error ? "error" : "");
        li.append(el("b", null, "result " + r.name));
        li.append(el("span", "muted", "  " + fmt(r.wall_s) + " s"));
        if (r.is_error) li.append(" ", badge("error", "bad"));
        if (r.truncated) li.append(" ", badge("truncated", "warn"));
        li.append(el("pre", "content", r.content));
        ul.append(li);
      }
      box.append(ul);
    }
    return box;
  }

  function renderBody(card) {
    if (card.rendered) return;
    card.rendered = true;
    const rec = card.rec;
    const body = el("div", "body");
    const marks = driftMarks(rec);
    if (rec.errors.length) {
      const ul = el("ul", "errors");
      for (const e of rec.errors) ul.append(el("li", null, e));
      body.append(ul);
    }
    const imgs = imagesFor(rec, null);
    if (imgs) body.append(imgs);
    if (rec.diff) body.append(diffBlock(rec));
    const nPrompt = rec.prompt.ids.length;
    const driftInPrompt = rec.diff && rec.diff.status === "drift" && rec.diff.first < nPrompt;
    body.append(sub("prompt · " + nPrompt + " tokens", promptTokens(rec, marks), driftInPrompt));
    rec.turns.forEach((t, k) => body.append(turnBlock(rec, t, k, marks)));
    const msgs = el("div");
    for (const m of rec.messages) {
      const line = el("div", "content");
      const calls = m.calls.length ? " → " + m.calls.join(", ") : "";
      line.append(el("b", null, m.role + calls + ": "));
      line.append(m.content);
      msgs.append(line);
    }
    body.append(sub("messages · " + rec.messages.length, msgs, false));
    body.append(sub("metadata", el("pre", "json", JSON.stringify(rec.meta, null, 2)), false));
    card.node.append(body);
  }

  function buildCard(rec) {
    const node = el("details", "ep");
    node.dataset.i = rec.i;
    const s = el("summary");
    const trained = rec.resp.mask.reduce((a, b) => a + b, 0);
    s.append(el("b", null, "#" + rec.i));
    if (rec.env) s.append(badge(rec.env));
    s.append(badge("reward " + fmt(rec.reward), rec.reward > 0 ? "good" : ""));
    s.append(badge(rec.term, rec.term === "done" ? "" : "warn"));
    const sizes = rec.turns.length + " turns · " + trained + "/" + rec.resp.mask.length + " trained";
    s.append(el("span", "muted", sizes));
    if (rec.errors.length) s.append(badge(rec.errors.length + " error(s)", "bad"));
    if (rec.diff && rec.diff.status === "drift") s.append(badge("template drift", "bad"));
    if (rec.versions) {
      const mixed = rec.versions.updates.length > 0;
      const b = badge(versionText(rec.versions), mixed ? "warn ver" : "ver");
      b.title = "policy versions that sampled this episode's tokens (trainer.async)";
      s.append(b);
    }
    if (rec.split > 1) s.append(badge("episode split into " + rec.split + " segments", "warn"));
    node.append(s);
    const card = { rec, node, rendered: false, search: searchText(rec) };
    node.addEventListener("toggle", () => { if (node.open) renderBody(card); });
    cards.push(card);
    return node;
  }

  function searchText(rec) {
    const parts = [rec.env, rec.term, ...rec.errors];
    for (const m of rec.messages) parts.push(m.content, ...m.calls);
    return parts.join("\n").toLowerCase();
  }

  // ---- filters -----------------------------------------------------------------------
  function num(id) {
    const v = $(id).value;
    return v === "" ? null : Number(v);
  }

  function applyFilters() {
    const env = $("f-env").value, term = $("f-term").value, text = $("f-text").value.toLowerCase();
    const rmin = num("f-rmin"), rmax = num("f-rmax");
    const errOnly = $("f-err").checked, driftOnly = $("f-drift").checked;
    let n = 0;
    for (const c of cards) {
      const r = c.rec;
      const ok = (!env || r.env === env) && (!term || r.term === term)
        && (rmin === null || r.reward >= rmin) && (rmax === null || r.reward <= rmax)
        && (!errOnly || r.errors.length > 0)
        && (!driftOnly || (r.diff && r.diff.status === "drift"))
        && (!text || c.search.includes(text));
      c.node.hidden = !ok;
      if (ok) n++;
    }
    $("count").textContent = "showing " + n + " of " + cards.length;
  }

  // ---- tooltip -----------------------------------------------------------------------
  const tip = $("tip");
  function tipText(span) {
    const rec = D.episodes[Number(span.dataset.e)];
    const key = span.dataset.k;
    if (key.startsWith("p")) {
      const k = Number(key.slice(1));
      return "prompt token " + k + "\nid " + rec.prompt.ids[k] + "\n(not trained)";
    }
    const k = Number(key);
    const lines = ["response token " + k, "id " + rec.resp.ids[k], "mask " + rec.resp.mask[k]];
    if (rec.resp.mask[k]) {
      const lp = rec.resp.lp[k];
      lines.push("rollout logprob " + fmt(lp, 4) + "  (p=" + fmt(Math.exp(lp), 3) + ")");
      if (rec.resp.tlp) {
        const tlp = rec.resp.tlp[k];
        lines.push("trainer logprob " + fmt(tlp, 4));
        lines.push("IS ratio        " + fmt(Math.exp(tlp - lp), 4));
      }
      if (rec.resp.ver) {
        const v = rec.resp.ver[k], hi = rec.versions ? rec.versions.hi : v;
        const older = v >= 0 && v < hi ? "  (episode's newest: " + hi + ")" : "";
        lines.push("weight version  " + v + older);
      }
    } else lines.push("env/tool token (not trained)");
    return lines.join("\n");
  }
  function onOver(ev) {
    const span = ev.target.closest && ev.target.closest(".tok[data-e]");
    if (!span) { tip.hidden = true; return; }
    tip.textContent = tipText(span);
    tip.hidden = false;
    onMove(ev);
  }
  function onMove(ev) {
    if (tip.hidden) return;
    const x = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
    const y = Math.min(ev.clientY + 14, window.innerHeight - tip.offsetHeight - 8);
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }

  // ---- version colouring -------------------------------------------------------------
  function versionControls() {
    const opt = $("colour").querySelector("option[value='ver']");
    if (!VERSIONS.length) {
      opt.disabled = true;
      opt.title = "no episode records the policy version of its tokens "
        + "(Trajectory.weight_versions, written by trainer.async)";
      $("colour").title = opt.title;
      return;
    }
    const box = $("ver-legend");
    box.append(el("span", "muted", "policy version:"));
    for (const v of VERSIONS) {
      const sw = el("span", "tok m1 ver-sw", "v" + v);
      sw.style.backgroundColor = verColour(v);
      sw.dataset.v = v;
      box.append(sw);
    }
    const old = el("span", "tok m1 v-old", "older than the episode's newest");
    old.style.backgroundColor = verColour(VERSIONS[0]);
    box.append(old, el("span", "tok m0 v-env", "env / tool (no version)"));
  }

  // ---- wiring ------------------------------------------------------------------------
  header();
  fillSelect($("f-env"), D.episodes.map((r) => r.env));
  fillSelect($("f-term"), D.episodes.map((r) => r.term));
  const main = $("episodes");
  for (const rec of D.episodes) main.append(buildCard(rec));
  for (const id of ["f-env", "f-term", "f-rmin", "f-rmax", "f-err", "f-drift", "f-text"]) {
    $(id).addEventListener("input", applyFilters);
    $(id).addEventListener("change", applyFilters);
  }
  versionControls();
  $("colour").addEventListener("change", () => {
    colourMode = $("colour").value;
    $("ver-legend").hidden = colourMode !== "ver";
    for (const span of main.querySelectorAll(".tok.m1, .tok.m0")) {
      paint(span, D.episodes[Number(span.dataset.e)], Number(span.dataset.k));
    }
  });
  $("expand-all").addEventListener("click", () => {
    for (const c of cards) if (!c.node.hidden) { renderBody(c); c.node.open = true; }
  });
  $("collapse-all").addEventListener("click", () => {
    for (const c of cards) c.node.open = false;
  });
  main.addEventListener("mouseover", onOver);
  main.addEventListener("mousemove", onMove);
  main.addEventListener("mouseleave", () => { tip.hidden = true; });
  applyFilters();
  if (cards.length === 1) { renderBody(cards[0]); cards[0].node.open = true; }
  document.body.dataset.ready = "1";
})();
