// The build lands in frontend/dist, which the dashboard serves at / (routes/frontend.py)
// itself, with no CDN. base "./" keeps every asset URL relative: the app works under any URL
// prefix a reverse proxy adds (Ray #35269).
import { defineConfig } from "vite";

export default defineConfig({
  base: "./",
  esbuild: { jsx: "automatic", jsxImportSource: "preact" },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    target: "es2022",
    chunkSizeWarningLimit: 400,
  },
  server: {
    // `npm run dev` proxies the API to a running dashboard (EMBER_DASHBOARD, default :8265).
    proxy: {
      "/api": { target: process.env.EMBER_DASHBOARD ?? "http://127.0.0.1:8265", ws: true },
    },
  },
});
