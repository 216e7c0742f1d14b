// The tutorial's front end: sign in, a live list of posts in German with their authors and cover
// thumbnails, and a post published by schedule. Bundle it with esbuild (see the tutorial page).
import { AuthStore, CmsClient, CmsError } from "cms-client";

const API = "http://127.0.0.1:8090"; // the CMS: another origin than this page's (CORS_ORIGINS lists this page's)
const LOCALE = "de"; // localized fields in German, falling back to English where a post has no German
const client = new CmsClient(API, { authStore: new AuthStore({ storage: localStorage }) });
const users = client.collection("users");
const posts = client.collection("posts");
const $ = (id) => document.getElementById(id);

// --- signing in and out: a user of the `users` auth collection --------------------------------------

$("sign-in").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = new FormData(event.target);
  try {
    await users.auth.authWithPassword(form.get("email"), form.get("password"));
    await start();
  } catch (error) {
    $("sign-in-error").textContent = error instanceof CmsError ? error.detail : `No answer from ${API}: ${error.message}`;
  }
});

$("sign-out").addEventListener("click", async () => {
  await client.realtime.unsubscribe(); // every subscription
  await users.auth.logout();
  location.reload();
});

if (client.authStore.isValid && client.authStore.collection === "users") {
  start(); // still signed in from an earlier visit (the store is in localStorage)
}

async function start() {
  $("sign-in").hidden = true;
  $("app").hidden = false;
  $("who").textContent = client.authStore.record.name || client.authStore.record.email;
  await showPosts();
  // a live list: every published post (a first publish is a `create`) arrives here, in German, with its author
  await client.realtime.subscribe("posts/*", onPostEvent, { expand: "author", locale: LOCALE });
}

// --- the list: `expand=author`, `locale=de`, and a cover thumbnail ----------------------------------

async function showPosts() {
  const page = await posts.getList(1, 20, { sort: "-created", expand: "author", locale: LOCALE });
  const token = await fileToken();
  $("posts").replaceChildren(...page.items.map((post) => postItem(post, token)));
}

async function onPostEvent(event) {
  $("posts").querySelector(`[data-id="${event.record.id}"]`)?.remove();
  if (event.action !== "delete") {
    $("posts").prepend(postItem(event.record, await fileToken()));
  }
}

function postItem(post, token) {
  const item = document.createElement("li");
  item.dataset.id = post.id;
  if (post.cover) {
    // `cover` is a protected file field: an <img> sends no Authorization header, so its URL carries a file token
    const img = document.createElement("img");
    img.alt = "";
    img.src = client.files.getURL(post, post.cover, { thumb: "100x100", format: "webp", token });
    item.append(img);
  }
  const title = document.createElement("strong");
  title.textContent = post.title;
  const author = document.createElement("span");
  author.textContent = `by ${post.expand?.author?.name ?? "?"}`;
  item.append(title, author);
  return item;
}

// A file token lasts 2 minutes; one serves every image rendered meanwhile.
let token = { value: "", until: 0 };
async function fileToken() {
  if (Date.now() > token.until) {
    token = { value: await client.files.getToken(), until: Date.now() + 90_000 };
  }
  return token.value;
}

// --- a draft, published by schedule: the worker publishes it, and the live list shows it ------------

$("write").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = new FormData(event.target);
  // `posts` has drafts: a create makes a draft that readers do not see yet
  const draft = await posts.create({ title: form.get("title"), author: client.authStore.record.id });
  const at = new Date(Date.now() + Number(form.get("delay")) * 1000);
  const scheduled = await posts.publish(draft.id, { at });
  $("scheduled").textContent = `"${draft.title}" is scheduled for ${new Date(scheduled.scheduled_at).toLocaleTimeString()}`;
  event.target.reset();
});
