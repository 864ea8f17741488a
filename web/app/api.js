// The server's JSON API: one fetch wrapper that adds the CSRF header and reports an expired
// session once (the app then shows the login view and keeps what the user was typing).

let csrfToken = null;
const unauthorizedListeners = new Set();

export class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `request failed (${status})`);
    this.status = status;
    this.code = error.code || "error";
    this.body = body || {};
  }
}

export function onUnauthorized(listener) {
  unauthorizedListeners.add(listener);
}

export function setCsrfToken(token) {
  csrfToken = token || null;
}

export async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && csrfToken) headers["X-CSRF-Token"] = csrfToken;
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
    cache: "no-store",
  });
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (response.status === 401) {
    for (const listener of unauthorizedListeners) listener();
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

export const me = () => api("GET", "/api/v1/me");
export const login = (username, password) => api("POST", "/api/v1/login", { username, password });
export const logout = () => api("POST", "/api/v1/logout", {});
export const conversations = () => api("GET", "/api/v1/conversations");
export const conversation = (id) => api("GET", `/api/v1/conversations/${encodeURIComponent(id)}`);

export function messages(id, before) {
  const query = new URLSearchParams({ limit: "100" });
  if (before) query.set("before", String(before));
  return api("GET", `/api/v1/conversations/${encodeURIComponent(id)}/messages?${query}`);
}

export const postMessage = (id, text) =>
  api("POST", `/api/v1/conversations/${encodeURIComponent(id)}/messages`, { text });

// A typed action; an error answer (e.g. 409 session_conflict) is returned, not thrown, so
// callers can show it as it is.
export async function action(name, body) {
  try {
    return { status: 200, body: await api("POST", `/api/v1/actions/${name}`, body) };
  } catch (err) {
    if (err instanceof ApiError && err.status !== 401) return { status: err.status, body: err.body };
    throw err;
  }
}
