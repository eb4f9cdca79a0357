// Keeps the page's uncaught errors, failed asset loads, what its content security policy refused
// and console.error calls in window.__errors, so the board can show them and the browser tests
// (of the board and of /docs) can assert there are none. A classic script,
// loaded before the modules, so errors while they load are caught too.
(function () {
  'use strict';
  var errors = (window.__errors = []);
  function note(text) {
    errors.push(String(text));
    window.dispatchEvent(new CustomEvent('board-error', { detail: String(text) }));
  }
  window.addEventListener(
    'error',
    function (event) {
      if (event.target && event.target !== window) {
        note('failed to load ' + (event.target.src || event.target.href || event.target.tagName));
      } else {
        note(event.message || String(event.error));
      }
    },
    true
  );
  // Anything the content security policy refused: the pages load nothing from elsewhere.
  document.addEventListener('securitypolicyviolation', function (event) {
    note('refused by ' + event.effectiveDirective + ': ' + (event.blockedURI || 'inline'));
  });
  window.addEventListener('unhandledrejection', function (event) {
    var reason = event.reason;
    note('unhandled rejection: ' + ((reason && (reason.stack || reason.message)) || reason));
  });
  var original = console.error.bind(console);
  console.error = function () {
    note(Array.prototype.map.call(arguments, String).join(' '));
    original.apply(null, arguments);
  };
})();
