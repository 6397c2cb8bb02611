"""roll plugin entry point: registers ``sokoban`` and ROLL's Sokoban presets (lazily, by import path).

One env class, three registrations: a preset's ``defaults`` are the base of its ``env_config``, so
``env_type: sokoban_larger`` or the tag ``LargerSokoban`` gives 8x8 rooms with two boxes, while a
``custom_envs`` entry can still override any field.
"""

from roll_core.hookspecs import hookimpl

TARGET = "roll_env_sokoban.env:SokobanEnv"

#: the XSB notation of the Sokoban community, with ``_`` for floor so no cell is blank
XSB_GRID_LOOKUP = {0: "#", 1: "_", 2: ".", 3: "*", 4: "$", 5: "@", 6: "+"}


@hookimpl
def roll_register_envs(register):
    register("sokoban", TARGET, tags=["Sokoban", "SimpleSokoban"],
             description="Push every box onto a target (6x6 room, 1 box by default)")
    register("sokoban_larger", TARGET, tags=["LargerSokoban"],
             description="Sokoban in 8x8 rooms with 2 boxes",
             defaults={"dim_room": [8, 8], "num_boxes": 2, "search_depth": 100})
    register("sokoban_xsb", TARGET, tags=["SokobanDifferentGridVocab"],
             description="Sokoban drawn with different symbols (XSB notation)",
             defaults={"grid_lookup": XSB_GRID_LOOKUP})
