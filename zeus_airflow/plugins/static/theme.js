/* Follow Airflow's colour mode: inside Airflow's iframe, the parent page's <html class="dark">
   (next-themes); on its own, Airflow's saved choice (localStorage "theme"); otherwise the
   system's prefers-color-scheme, which the stylesheet handles without this script. */
(function () {
  var root = document.documentElement;

  function parentRoot() {
    try {
      var other = window.parent.document.documentElement;
      return other === root ? null : other;
    } catch (e) {
      return null; // another origin: nothing to read
    }
  }

  function chosenTheme() {
    var parent = parentRoot();
    if (parent) {
      if (parent.classList.contains("dark")) return "dark";
      if (parent.classList.contains("light")) return "light";
    }
    try {
      var saved = window.localStorage.getItem("theme");
      if (saved === "dark" || saved === "light") return saved;
    } catch (e) {}
    return null;
  }

  function apply() {
    var theme = chosenTheme();
    if (theme) root.setAttribute("data-theme", theme);
    else root.removeAttribute("data-theme");
  }

  apply();
  var parent = parentRoot();
  if (parent && window.MutationObserver) {
    new MutationObserver(apply).observe(parent, { attributes: true, attributeFilter: ["class"] });
  }
  window.addEventListener("storage", apply);
})();
