// Source files are read as text.
export function add(a, b) {
  return a + b;
}
