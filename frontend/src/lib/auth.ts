// The dashboard's token cookie can stop working while a page is open (it expired, or the
// cluster was started again with another token): the server then answers 401 to the page's
// calls. Loading the page again shows the server's sign-in form, which sets a new cookie and
// comes back here. At most once a minute per tab, so a server that refuses even a fresh
// cookie (cookies blocked) shows errors instead of reloading in a loop.
const KEY = "ember.signInAgain";
const MIN_GAP_MS = 60_000;

export function signInAgain(): void {
  const last = Number(sessionStorage.getItem(KEY) ?? 0);
  if (Date.now() - last < MIN_GAP_MS) return;
  sessionStorage.setItem(KEY, String(Date.now()));
  location.reload();
}
