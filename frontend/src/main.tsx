import { render } from "preact";
import { App } from "./App";
import { applyTheme, currentTheme } from "./lib/theme";
import { stream } from "./lib/stream";
import "./style.css";

applyTheme(currentTheme());
stream.start();
// The browser tests and the benchmark reach the stream through this handle (drop, status).
(window as unknown as { emberStream: typeof stream }).emberStream = stream;
render(<App />, document.getElementById("app")!);
