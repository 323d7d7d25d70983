// turnstile dashboard: keeps the numbers of a page live. Each element with a
// data-live attribute names where the server renders its content again; every two
// seconds (while the tab is visible) this fetches it and puts it in place. A region
// that holds the keyboard focus is left alone, so a person using a button or a link in
// it never loses their place. No other script runs on these pages.
(function () {
  'use strict';
  var PERIOD_MS = 2000;

  function refresh(region) {
    if (region.contains(document.activeElement)) {
      return;
    }
    fetch(region.getAttribute('data-live'), { credentials: 'same-origin' })
      .then(function (answer) {
        if (!answer.ok) {
          throw new Error('HTTP ' + answer.status);
        }
        return answer.text();
      })
      .then(function (html) {
        if (!region.contains(document.activeElement)) {
          region.innerHTML = html;
          region.removeAttribute('data-stale');
        }
      })
      .catch(function () {
        region.setAttribute('data-stale', '');
      });
  }

  setInterval(function () {
    if (document.hidden) {
      return;
    }
    document.querySelectorAll('[data-live]').forEach(refresh);
  }, PERIOD_MS);
})();
