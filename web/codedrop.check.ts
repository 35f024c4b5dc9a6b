// Type-checked, never run: codedrop.js (as the compiler infers it from its code and JSDoc) must
// export everything codedrop.d.ts declares, each assignable to its declaration. An import of
// "./codedrop.js" resolves to the .d.ts; tsconfig.json's path alias names the implementation.
import type * as Declared from "./codedrop.js";
import type * as Implemented from "codedrop-implementation";

export const implementsDeclarations: typeof Declared = {} as typeof Implemented;
